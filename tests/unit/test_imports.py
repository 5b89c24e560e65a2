"""What importing pgmem loads: agent processes start often, and each heavy package is paid at every start.

Each check runs in a fresh interpreter (this test process has long since imported everything).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import pgmem

#: Never loaded by ``import pgmem`` nor by the facades agents import: migrations (SQLAlchemy, alembic,
#: mako), the CLI (typer, rich), optional providers (openai, faiss), and the operations room.
HEAVY = ("sqlalchemy", "alembic", "mako", "faiss", "openai", "typer", "rich", "pgmem.ops")


def _loaded(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def _heavy(modules: set[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(name for name in names if name in modules or any(m.startswith(name + ".") for m in modules))


def test_import_pgmem_loads_nothing_heavy() -> None:
    # numpy (~100 ms), pydantic (~50 ms; pgmem.Message is a plain class) and pydantic-settings are not
    # needed to import pgmem either; neither flavour of the core is loaded before it is used
    # (pgmem.connect / pgmem.aconnect, or pgmem.Client etc.).
    modules = _loaded("import pgmem")
    assert _heavy(modules, (*HEAVY, "numpy", "pydantic", "pydantic_settings", "pgmem._sync", "pgmem._async")) == []


@pytest.mark.parametrize("entry", ["pgmem.metagpt", "pgmem.openmanus", "pgmem.stores"])
def test_facades_load_nothing_heavy(entry: str) -> None:
    assert _heavy(_loaded(f"import {entry}")) == []


@pytest.mark.parametrize("flavour", ["pgmem._sync.client", "pgmem._async.client"])
def test_the_core_does_not_import_operations(flavour: str) -> None:
    """The core finds no server and runs no migration: pgmem.connecting composes it with pgmem.ops."""
    modules = _loaded(f"import {flavour}")
    assert _heavy(modules) == []
    assert "pgmem.connecting" in modules  # through pgmem/__init__, which exports connect/aconnect
    other = "pgmem._async" if flavour.startswith("pgmem._sync") else "pgmem._sync"
    assert not any(m.startswith(other + ".") for m in modules)


def test_lazy_exports_are_the_core_classes() -> None:
    from pgmem._async.client import AsyncClient
    from pgmem._async.messages import AsyncMessageRepository
    from pgmem._sync.client import Client
    from pgmem._sync.messages import MessageRepository

    assert (pgmem.Client, pgmem.AsyncClient) == (Client, AsyncClient)
    assert (pgmem.MessageRepository, pgmem.AsyncMessageRepository) == (MessageRepository, AsyncMessageRepository)
    assert all(hasattr(pgmem, name) for name in pgmem.__all__)
    with pytest.raises(AttributeError, match="no_such_thing"):
        pgmem.no_such_thing  # noqa: B018
