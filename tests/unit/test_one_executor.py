"""One executor for every statement (issue 33, item 1; STYLE.md): no module of pgmem talks to the driver
around ``pgmem/_async/executor.py`` and the namespace layer beneath it (``scope.py``), so the retry policy
and the error translation cover every statement of the core. A new ``conn.execute(...)``, cursor, pipeline,
COPY or ``scope.rows(...)`` anywhere else fails here: run it through ``client.executor`` (``rows``,
``run``, ``transaction``) or an ``AsyncBlock``, or name it below with the reason.

(``scope``'s block functions, ``transaction``, ``block``, ``borrowed``, ``set_session``, are the namespace
layer's own statements: the executor's blocks and the plumbing of ``client.connection()`` for the
caller's SQL. The generated ``pgmem/_sync`` mirrors ``pgmem/_async``; ``tools/gen_sync.py --check`` keeps
it so.)
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pgmem"

#: The core's modules that run statements on the driver themselves.
DRIVER = {
    "_async/executor.py": "the executor: translation, deadline, the lost-connection policy",
    "_async/scope.py": "the namespace layer under it: each statement scoped, in one round trip",
}

#: Calls elsewhere in the core that may reach the driver, as (module, call's source) -> why.
ALLOWED: dict[tuple[str, str], str] = {}

#: Code outside the core with connections of its own (no client's pool, no namespace of a client's).
OUTSIDE = {
    "_sync/": "generated from pgmem/_async (checked there)",
    "cache/": "the FAISS cache: a sync reader and a listener on connections of its own",
    "ops/": "operations (migrate, the embedded server, doctor, reports): the owner's tools beside any client",
    "doorbell.py": "the doorbell: one LISTEN/NOTIFY connection per database, in a thread of its own",
    "security.py": "roles and grants, run as the owner by `pgmem migrate` and `pgmem roles`",
    "wire.py": "libpq itself, under scope.rows",
    "examples/": "the demo's report: reads of its own database, an example of SQL on the views",
}

_DRIVER_CALLS = {"execute", "executemany", "cursor", "pipeline"}
#: psycopg's when given a statement (``dict.copy()`` takes none; ``copy.copy(x)`` is the module's).
_WITH_STATEMENT = {"copy", "stream"}


def raw_calls(source: str) -> list[tuple[int, str]]:
    """The calls of ``source`` that reach the driver or the namespace layer's statements directly: line and
    source text of each."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        scoped = isinstance(owner, ast.Name) and owner.id == "scope" and name in {"rows", "execute"}
        copying = name in _WITH_STATEMENT and node.args and not (isinstance(owner, ast.Name) and owner.id == "copy")
        if name in _DRIVER_CALLS or copying or scoped:
            found.append((node.lineno, ast.get_source_segment(source, node) or name))
    return sorted(found)


def _violations() -> tuple[list[str], set[tuple[str, str]]]:
    bad, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in DRIVER or any(module.startswith(prefix) for prefix in OUTSIDE):
            continue
        for line, call in raw_calls(path.read_text()):
            if (module, call) in ALLOWED:
                used.add((module, call))
            else:
                bad.append(f"pgmem/{module}:{line}: {call}")
    return bad, used


def test_every_statement_of_the_core_goes_through_the_executor() -> None:
    bad, used = _violations()
    assert bad == [], "statements around the executor (see this test's docstring):\n" + "\n".join(bad)
    stale = sorted(set(ALLOWED) - used)
    assert stale == [], f"allowed calls that are gone: remove them from ALLOWED: {stale}"


def test_the_scan_finds_what_it_forbids() -> None:
    found = raw_calls(
        "async def f(conn, cur, scope, params):\n"
        "    await conn.execute('SELECT 1')\n"
        "    rows = await scope.rows(conn, 'ns', 'SELECT 1', {})\n"
        "    async with conn.pipeline():\n"
        "        pass\n"
        "    cur.copy('COPY t FROM STDIN')\n"
        "    params.copy()\n"
        "    await block.rows('SELECT 1')\n"
        "    '''conn.execute('in a docstring')'''\n"
    )
    assert [line for line, _ in found] == [2, 3, 4, 6]
