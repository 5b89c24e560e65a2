"""Every ```python block of README.md runs as pasted: each in a fresh interpreter, against a fresh database
of the test server (``PGMEM_DSN``), with the offline embedder and no API key, in an empty directory.

A block that needs an optional framework names its extra in a comment (``pip install 'pgmem[langgraph]'``)
and is skipped, saying so, when that extra is not installed. A block that truly cannot run in a test is
preceded by ``<!-- readme-test: skip (why) -->``; the reason is the skip's message.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

#: What a block's ``# pip install ...`` comment names -> the modules that tell it is installed: pgmem's
#: extras (pyproject.toml) and the few other packages a block uses.
NEEDS = {
    "pgmem[langgraph]": ("langgraph", "langgraph.checkpoint"),
    "pgmem[langchain]": ("langchain_core",),
    "pgmem[openai-agents]": ("agents",),
    "pgmem[llama-index]": ("llama_index.core",),
    "pgmem[mcp]": ("mcp",),
    "pgmem[local]": ("sentence_transformers",),
    "pgmem[tokens]": ("tiktoken",),
    "pgmem[integrations]": ("langgraph", "langchain_core", "agents", "llama_index.core", "mcp"),
    "langgraph-checkpoint-postgres": ("langgraph.checkpoint.postgres",),
}

_FENCE = re.compile(r"^```(\w*)\s*$")
_SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((.+)\)\s*-->")
_PIP = re.compile(r"^\s*#\s*pip install (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    heading: str
    code: str
    skip: str | None

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-")[:40]
        return f"L{self.line}-{slug}"


def blocks(text: str) -> list[Block]:
    """The README's python blocks, each with its line, the heading above it and a skip marker before it."""
    found: list[Block] = []
    lines = text.splitlines()
    heading = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        fence = _FENCE.match(line)
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        if fence.group(1) == "python":
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marker = _SKIP.search(before)
            code = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(Block(i + 1, heading, code, marker.group(1) if marker else None))
        i = end + 1
    return found


def needs(block: Block) -> list[str]:
    """What the block's ``# pip install ...`` comments name (quotes and comments after them left out)."""
    out = []
    for line in _PIP.findall(block.code):
        out += [word.strip("'\"") for word in line.split("#")[0].split()]
    return out


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def _params() -> list[object]:
    return [pytest.param(block, id=block.id) for block in blocks(README.read_text(encoding="utf-8"))]


def test_the_readme_has_python_blocks() -> None:
    found = blocks(README.read_text(encoding="utf-8"))
    assert len(found) >= 20, [b.id for b in found]
    assert sum(b.skip is not None for b in found) <= 4  # skips stay the exception


@pytest.mark.parametrize("block", _params())
def test_readme_block_runs(block: Block, dsn: str, tmp_path: Path) -> None:
    if block.skip is not None:
        pytest.skip(f"README line {block.line}: {block.skip}")
    for need in needs(block):
        if need not in NEEDS:
            pytest.fail(f"README line {block.line} installs {need!r}, unknown to this test (add it to NEEDS)")
        if not all(_installed(module) for module in NEEDS[need]):
            pytest.skip(f"README line {block.line} needs {need}, not installed here: pip install '{need}'")
    script = tmp_path / f"readme_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PGMEM_"))}
    env |= {"PGMEM_DSN": dsn, "PGMEM_HOME": str(tmp_path / "home"), "PGMEM_EMBEDDER": "hashing"}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, (
        f"README line {block.line} ({block.heading}) failed:\n{block.code}\n--- stderr ---\n{result.stderr[-4000:]}"
    )
