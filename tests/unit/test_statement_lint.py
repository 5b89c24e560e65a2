"""Every table a client's statement reads or changes is named with its namespace, literally.

A distributed planner (Citus, docs/scale-out.md) routes a statement to the shard of its namespace only
when each table reference carries ``namespace = %(ns)s`` (a join on ``a.namespace = b.namespace`` does not
count: the statement goes to every shard, and ``FOR UPDATE`` is refused). On one PostgreSQL the predicate
costs nothing and row-level security holds the statement to the namespace anyway; this lint keeps the
statements distributable as they change. It reads ``sql/*.sql`` as loaded (fragments expanded).
"""

from __future__ import annotations

import re

import pytest

from pgmem.planning import statements
from pgmem.planning.resources import resource_path

GROUPS = sorted(p.stem for p in resource_path("sql").glob("*.sql") if p.stem != statements.SHARED)

#: Tables without a namespace: the model registry (a reference table on Citus).
GLOBAL_TABLES = frozenset({"embedding_models"})

#: Whole files that are not a client's statements.
EXEMPT_GROUPS = {
    "triggers": "trigger functions: single-node work, moved into statements when distributed (docs/scale-out.md)",
    "views": "the analytics views span every namespace: the owner's to read; an app role sees its own rows",
    "analytics": "`pgmem stats` over the views, for the owner",
}

#: Statements that are not scoped to one namespace on purpose, with the reason.
EXEMPT_STATEMENTS = {
    ("retention", "namespaces"): "pgmem.admin: the owner lists every namespace",
    ("retention", "expired_namespaces"): "pgmem.admin: the owner lists every namespace",
    ("retention", "policy_namespaces"): "pgmem.admin: the owner lists every namespace",
    ("vectors", "outbox_namespaces"): "pgmem.admin: the owner lists every namespace",
    ("vectors", "indexed_models"): "pgmem migrate: which models have item vectors anywhere (the owner)",
    ("vectors", "cache_head_libpq"): "libpq's own parameters ($1 is the namespace)",
}

_REFERENCE = re.compile(r"\b(FROM|JOIN|UPDATE|USING)\s+pgmem\.(\w+)\b(?!\s*\()(?:\s+(?:AS\s+)?(\w+))?", re.I)
_NOT_ALIASES = frozenset(
    "WHERE ON SET SELECT VALUES USING ORDER GROUP LIMIT JOIN LEFT CROSS RETURNING DO WITH UNION FOR AND".split()
)


def _unscoped(query: str) -> list[str]:
    """The table references of ``query`` whose alias (or the bare table) has no ``namespace = %(ns)s``."""
    code = re.sub(r"--[^\n]*", "", query)
    missing = []
    for match in _REFERENCE.finditer(code):
        table, alias = match.group(2), match.group(3)
        if table in GLOBAL_TABLES:
            continue
        if alias is not None and alias.upper() in _NOT_ALIASES:
            alias = None
        who = re.escape(alias or table)
        patterns = [rf"\b{who}\.namespace\s*=\s*%\(ns\)s", rf"%\(ns\)s\s*=\s*{who}\.namespace\b"]
        if alias is None:
            patterns.append(r"(?<![\w.])namespace\s*=\s*%\(ns\)s")
        if not any(re.search(p, code) for p in patterns):
            missing.append(f"pgmem.{table}" + (f" AS {alias}" if alias else ""))
    return missing


@pytest.mark.parametrize("group", [g for g in GROUPS if g not in EXEMPT_GROUPS])
def test_every_table_reference_names_the_namespace(group: str) -> None:
    found = {
        name: missing
        for name, query in statements.load(group).items()
        if (group, name) not in EXEMPT_STATEMENTS and (missing := _unscoped(query))
    }
    assert not found, f"sql/{group}.sql: statements with a table reference not scoped by namespace = %(ns)s: {found}"


def test_the_lint_catches_a_join_on_the_namespace_column() -> None:
    """A join condition on the column is what the statements had; only a literal predicate routes."""
    joined = """SELECT m.id FROM pgmem.memory_entries AS e
JOIN pgmem.messages AS m ON m.namespace = e.namespace AND m.id = e.message_id
WHERE e.namespace = %(ns)s"""
    assert _unscoped(joined) == ["pgmem.messages AS m"]
    assert _unscoped(joined.replace("m.namespace = e.namespace", "m.namespace = %(ns)s")) == []
    assert _unscoped("SELECT count(*) FROM pgmem.fts_terms(%(q)s)") == []  # a function, not a table
    assert _unscoped("DELETE FROM pgmem.messages WHERE id = %(id)s") == ["pgmem.messages"]


def test_the_exemptions_name_statements_that_exist() -> None:
    for group, name in [*EXEMPT_STATEMENTS, *CLOCK_EXEMPT]:
        assert name in statements.load(group), (group, name)
    assert set(EXEMPT_GROUPS) <= set(GROUPS)


# -- the server's clock where a distributed planner evaluates it ------------------------------------------
# Citus evaluates now() (and other non-immutable calls) on the coordinator before it sends a modification to
# a shard, except where the value depends on the row: inside CASE or COALESCE, and in the SET list of an
# upsert's DO UPDATE. There it refuses the statement ("non-IMMUTABLE functions are not allowed in CASE or
# COALESCE statements"). pgmem's statements keep the server's clock (a client's may be off) and put it where
# it is evaluated once: a branch picked in Python, now() outside the CASE, excluded.<column> in an upsert.

_CLOCK = re.compile(
    r"\b(?:now|clock_timestamp|statement_timestamp|transaction_timestamp|random)\s*\(\)|\bcurrent_timestamp\b", re.I
)


def _balanced(code: str, start: int) -> str:
    """The text of the parenthesised group opening at ``code[start]``."""
    depth = 0
    for i in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return code[start : i + 1]
    return code[start:]


def _case_end(code: str, start: int) -> str:
    """The text of the CASE expression starting at ``code[start]`` (nested CASEs counted)."""
    depth = 0
    for match in re.compile(r"\b(CASE|END)\b", re.I).finditer(code, start):
        depth += 1 if match.group(1).upper() == "CASE" else -1
        if depth == 0:
            return code[start : match.end()]
    return code[start:]


def _set_list(rest: str) -> str:
    """An upsert's SET list: up to its WHERE or RETURNING, or the parenthesis that closes its CTE."""
    depth = 0
    for match in re.compile(r"[()]|\b(?:RETURNING|WHERE)\b", re.I).finditer(rest):
        token = match.group(0)
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
            if depth < 0:
                return rest[: match.start()]
        elif depth == 0:
            return rest[: match.start()]
    return rest


def _clock_in_row_dependent_places(query: str) -> list[str]:
    code = re.sub(r"--[^\n]*", "", query)
    found = []
    for match in re.finditer(r"\bcoalesce\s*\(", code, re.I):
        text = _balanced(code, match.end() - 1)
        if _CLOCK.search(text):
            found.append("COALESCE" + text)
    for match in re.finditer(r"\bCASE\b", code, re.I):
        text = _case_end(code, match.start())
        if _CLOCK.search(text):
            found.append(text)
    for match in re.finditer(r"\bDO\s+UPDATE\s+SET\b", code, re.I):
        text = _set_list(code[match.end() :])
        if _CLOCK.search(text):
            found.append("DO UPDATE SET" + text)
    return found


#: Statements that still read the clock where it depends on the row, with the reason (none today).
CLOCK_EXEMPT: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("group", [g for g in GROUPS if g != "triggers"])
def test_no_clock_where_the_value_depends_on_the_row(group: str) -> None:
    found = {
        name: places
        for name, query in statements.load(group).items()
        if (group, name) not in CLOCK_EXEMPT and (places := _clock_in_row_dependent_places(query))
    }
    assert not found, f"sql/{group}.sql: the clock inside CASE/COALESCE or an upsert's SET list: {found}"


def test_the_clock_lint_catches_each_place() -> None:
    assert _clock_in_row_dependent_places("UPDATE t SET a = CASE WHEN x THEN now() END WHERE y")
    assert _clock_in_row_dependent_places("SELECT coalesce(%(b)s, now() - interval '1 s')")
    assert _clock_in_row_dependent_places("INSERT INTO t VALUES (1) ON CONFLICT (k) DO UPDATE SET u = now()")
    assert not _clock_in_row_dependent_places("UPDATE t SET a = now() + CASE WHEN x THEN interval '0 s' END")
    assert not _clock_in_row_dependent_places(
        "INSERT INTO t (k, u) VALUES (1, now()) ON CONFLICT (k) DO UPDATE SET u = excluded.u RETURNING now()"
    )
    assert _clock_in_row_dependent_places(
        "WITH a AS (INSERT INTO t VALUES (1) ON CONFLICT (k) DO UPDATE SET u = now(), v = 1 RETURNING k) SELECT 1"
    )
