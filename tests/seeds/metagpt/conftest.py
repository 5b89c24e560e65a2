"""MetaGPT reads its configuration when ``metagpt.const`` is first imported (``config/config2.yaml`` under
``METAGPT_PROJECT_ROOT``, else the working tree's root) and requires an LLM section in it. Before any test
module imports MetaGPT, point it at a temporary folder whose LLM is never called (no test calls one)."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

_CONFIG = """\
# Written by pgmem's seed tests: MetaGPT loads this at import; no test calls the LLM.
llm:
  api_type: openai
  model: gpt-4
  base_url: "http://127.0.0.1:9/v1"
  api_key: "unused"
"""

if importlib.util.find_spec("metagpt") is not None and "METAGPT_PROJECT_ROOT" not in os.environ:
    _root = Path(tempfile.mkdtemp(prefix="pgmem-metagpt-"))
    (_root / "config").mkdir()
    (_root / "config" / "config2.yaml").write_text(_CONFIG)
    os.environ["METAGPT_PROJECT_ROOT"] = str(_root)
