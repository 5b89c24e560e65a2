"""No password in what the ``pgmem`` command prints, whatever shape of DSN it is given (issue 35, item 2).

Each DSN form holds a fresh random secret; each command runs in a subprocess, as a user would, and
neither its output nor its error stream may hold the secret (tracebacks included: the CLI prints its
own for unexpected errors).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.integration.test_cli import run_cli

#: DSN forms that once leaked: spaces in a URL's password, an unquoted key=value password with spaces, a
#: bad percent-escape, and a well-formed one to a port nobody listens on. {s} is the secret.
FORMS = (
    "postgresql://user:pass word{s}@127.0.0.1:1/db",
    "password=pa ss {s} host=127.0.0.1 port=1",
    "postgresql://u:pw-{s}%zz@127.0.0.1:1/db",
    "postgresql://u:{s}@127.0.0.1:1/db",
    "host=127.0.0.1 port=1 password='q {s} q'",
)
COMMANDS = (
    ("stats",),
    ("stats", "-n", "x", "--format", "json"),
    ("migrate",),
    ("migrate", "--sql"),
    ("doctor", "--no-embedder"),
    ("export", "-n", "x"),
)


@pytest.mark.parametrize(
    "form",
    # one URL and one key=value form in the default run (each runs every command in a process of its own,
    # 2-3 s); the other quoting cases in the slow leg
    [f if i < 2 else pytest.param(f, marks=pytest.mark.slow) for i, f in enumerate(FORMS)],
)
def test_no_command_prints_the_password(form: str, tmp_path: Path) -> None:
    from pgmem.revision import SCHEMA_REVISION

    secret = uuid.uuid4().hex
    dsn = form.format(s=secret)
    export = tmp_path / "x.jsonl"
    header = {"type": "header", "format": 1, "revision": SCHEMA_REVISION, "namespace": "x"}
    export.write_text(json.dumps(header) + "\n", encoding="utf-8")
    for command in (*COMMANDS, ("import", str(export))):
        result = run_cli(*command, "--dsn", dsn, env={"PGMEM_DSN": "", "PGCONNECT_TIMEOUT": "5"}, check=False)
        assert result.returncode != 0, (command, result.stdout)
        shown = result.stdout + result.stderr
        assert secret not in shown, (command, shown)
        assert secret[:12] not in shown and secret[-12:] not in shown, (command, shown)
