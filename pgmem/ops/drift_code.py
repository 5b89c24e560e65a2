"""The database's code against ``sql/``: pgmem's functions, triggers and views (pgmem.ops.drift).

Postgres prints a function, trigger or view back in its own form (``pg_get_functiondef``,
``pg_get_triggerdef``, ``pg_get_viewdef``), so a declaration cannot be compared with the catalog as text.
Instead each declaration is executed, ``CREATE OR REPLACE``, in a savepoint, and what Postgres prints
before and after compared: a declaration that changes nothing is what the database holds. Verifying rolls
the savepoint back; repairing keeps it. This is tests/migrations/test_database_code.py's comparison (which
drops the objects first, in a database of its own) done in place: no scratch schema (the declarations name
schema ``pgmem``), no privilege beyond the owner's.

Replacing takes the locks the DDL takes until the transaction ends, a fraction of a second: writes to the
three tables with triggers wait (SHARE ROW EXCLUSIVE), and reads of the views (ACCESS EXCLUSIVE); a lock
not granted within 5 s leaves the definitions uncompared (a note) rather than queue every client behind
it. Only the objects' owner (or a superuser) may replace them: for another role :func:`compare` checks
that they exist, not what they say; what even the owner may not declare (a function's ``SET`` of a custom
parameter takes a superuser on PostgreSQL 15+; pgmem declares none since 0021) is a warning, not compared.

``pgmem.jsonb_contains`` and ``pgmem.ts_match`` (sql/leakproof.sql) are not compared here: only a superuser
may declare them as written (``LANGUAGE internal LEAKPROOF``), and migrations 0016 and 0027 declare them
otherwise for a role that is not one; pgmem.ops.leakproof checks them with their operators and indexes.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from pgmem.planning import statements

__all__ = ["GROUPS", "Block", "Finding", "blocks", "compare", "replay"]

#: The declarations of the database's code, executed in this order (a view after what it reads).
GROUPS = ("text_search", "triggers", "views")

_DECLARED = {
    "function": re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+pgmem\.(\w+)", re.IGNORECASE | re.MULTILINE),
    "trigger": re.compile(
        r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+(\w+)\s.*?\sON\s+pgmem\.(\w+)", re.IGNORECASE | re.MULTILINE | re.S
    ),
    "view": re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+pgmem\.(\w+)", re.IGNORECASE | re.MULTILINE),
}
_REPLACE = re.compile(r"^(\s*)CREATE\s+(TRIGGER|VIEW)\b", re.IGNORECASE | re.MULTILINE)
# security_invoker exists from PostgreSQL 15 (migration 0004 sets it there only).
_INVOKER = re.compile(r"\s+WITH\s*\(\s*security_invoker\s*=\s*true\s*\)", re.IGNORECASE)

_FUNCTIONS = """
SELECT format('pgmem.%s(%s)', p.proname, pg_get_function_identity_arguments(p.oid)), p.proname::text,
       pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')
FROM pg_proc AS p
WHERE p.pronamespace = 'pgmem'::regnamespace AND p.prokind IN ('f', 'p')
  AND p.proname NOT IN ('jsonb_contains', 'ts_match')"""
_TRIGGERS = """
SELECT c.relname::text, t.tgname::text, pg_get_triggerdef(t.oid), obj_description(t.oid, 'pg_trigger'),
       t.tgenabled::text
FROM pg_trigger AS t
JOIN pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'pgmem'::regnamespace AND NOT t.tgisinternal"""
_VIEWS = """
SELECT c.relname::text, pg_get_viewdef(c.oid), obj_description(c.oid, 'pg_class')
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'v'"""


@dataclass(frozen=True)
class Block:
    """One ``-- name:`` block of ``sql/<group>.sql``: a function (with its trigger, its comment) or a view."""

    group: str
    name: str
    text: str
    functions: frozenset[str]
    triggers: frozenset[tuple[str, str]]
    views: frozenset[str]

    @property
    def where(self) -> str:
        return f"sql/{self.group}.sql"


@functools.cache
def blocks() -> tuple[Block, ...]:
    """Every declaration of the database's code, in execution order."""
    found = []
    for group in GROUPS:
        for name, text in statements.load(group).items():
            found.append(
                Block(
                    group,
                    name,
                    text,
                    frozenset(_DECLARED["function"].findall(text)),
                    frozenset((table, trigger) for trigger, table in _DECLARED["trigger"].findall(text)),
                    frozenset(_DECLARED["view"].findall(text)),
                )
            )
    return tuple(found)


@dataclass(frozen=True)
class Finding:
    """A difference of the code: ``kind`` function, trigger or view; ``subject`` as reported."""

    kind: str
    subject: str
    detail: str
    severity: str = "drift"


#: (kind, key) -> what Postgres prints of it: the definition, its comment (and a trigger's enabled state).
Snapshot = dict[tuple[str, str], tuple[Any, ...]]


def _trigger_key(table: str, trigger: str) -> str:
    return f"{trigger} on pgmem.{table}"


def snapshot(conn: psycopg.Connection[Any]) -> Snapshot:
    taken: Snapshot = {}
    for key, _name, definition, comment in conn.execute(_FUNCTIONS):
        taken["function", key] = (definition, comment)
    for table, trigger, definition, comment, enabled in conn.execute(_TRIGGERS):
        taken["trigger", _trigger_key(table, trigger)] = (definition, comment, enabled)
    for view, definition, comment in conn.execute(_VIEWS):
        taken["view", f"pgmem.{view}"] = (definition, comment)
    return taken


def _text(block: Block, server: int) -> LiteralString:
    # The declarations come with the package, never from input: LiteralString (the rewrite keeps them so).
    text: LiteralString = _REPLACE.sub(r"\1CREATE OR REPLACE \2", block.text)
    return _INVOKER.sub("", text) if server < 150000 else text


def replay(
    conn: psycopg.Connection[Any], *, only: Callable[[Block], bool] = lambda _: True, recreate_views: bool = False
) -> dict[Block, psycopg.Error]:
    """Execute the declarations (``CREATE OR REPLACE``), each in a savepoint, in the caller's transaction;
    return those that failed, with their error (their savepoint rolled back).

    A view whose columns changed cannot be replaced. With ``recreate_views``, when one fails, every
    declared view is dropped (dependents first, no CASCADE: a view of yours on one of them stops it, and
    its error is raised) and declared again.
    """
    row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    server = int(row[0]) if row else 0
    failed: dict[Block, psycopg.Error] = {}
    for block in filter(only, blocks()):
        try:
            with conn.transaction():
                conn.execute(_text(block, server))
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected, psycopg.errors.QueryCanceled):
            raise
        except psycopg.Error as exc:
            failed[block] = exc
    if recreate_views and any(block.views for block in failed):
        views = [block for block in blocks() if block.views and only(block)]
        with conn.transaction():
            for block in reversed(views):
                for view in sorted(block.views):
                    conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier("pgmem", view)))
            for block in views:
                conn.execute(_text(block, server))
                failed.pop(block, None)
    return failed


def _first_change(live: str, declared: str) -> str:
    pairs = itertools.zip_longest(live.splitlines(), declared.splitlines(), fillvalue="")
    for number, (was, wanted) in enumerate(pairs, 1):
        if was != wanted:
            return f"line {number} is {was.strip()[:70]!r}, declared {wanted.strip()[:70]!r}"
    return "same text"  # pragma: no cover - a difference elsewhere (the comment) is reported instead


def _changed(kind: str, before: tuple[Any, ...], after: tuple[Any, ...], where: str) -> str:
    if before[0] != after[0]:
        return f"differs from {where}: {_first_change(before[0], after[0])}"
    if kind == "trigger" and before[2] != after[2]:
        return "disabled" if before[2] == "D" else f"enabled {before[2]!r} (ALTER TABLE … ENABLE TRIGGER)"
    return f"its comment differs from {where}"


def _presence(live: Snapshot) -> Iterator[Finding]:
    """What any role can check: every declared object exists (and no trigger is disabled)."""
    names = {(kind, key.split("(")[0]) for kind, key in live}
    declared = {("function", f"pgmem.{f}") for b in blocks() for f in b.functions}
    declared |= {("trigger", _trigger_key(t, n)) for b in blocks() for t, n in b.triggers}
    declared |= {("view", f"pgmem.{v}") for b in blocks() for v in b.views}
    for kind, subject in sorted(declared - names):
        yield Finding(kind, subject, "missing")
    for kind, subject in sorted(names - declared):
        yield Finding(kind, subject, "not declared by pgmem (left as it is)", "warning")
    for (kind, key), printed in sorted(live.items()):
        if kind == "trigger" and printed[2] == "D":
            yield Finding(kind, key, "disabled")


def compare(conn: psycopg.Connection[Any], *, definitions: bool) -> list[Finding]:
    """The code's differences from sql/: presence; with ``definitions``, the definitions too (the caller
    owns the objects: each declaration is replayed in a savepoint that is rolled back)."""
    before = snapshot(conn)
    found = list(_presence(before))
    if not definitions:
        return found
    reported = {f.subject for f in found}
    of_key = {
        **{("function", f"pgmem.{f}"): b for b in blocks() for f in b.functions},
        **{("trigger", _trigger_key(t, n)): b for b in blocks() for t, n in b.triggers},
        **{("view", f"pgmem.{v}"): b for b in blocks() for v in b.views},
    }
    with conn.transaction(force_rollback=True):
        # Not behind a long transaction that holds a table, with every client queued behind the replay.
        conn.execute("SET LOCAL lock_timeout = '5s'")
        failed = replay(conn)
        after = snapshot(conn)
    for block, exc in failed.items():
        subjects = [f"pgmem.{f}" for f in sorted(block.functions)] + [f"pgmem.{v}" for v in sorted(block.views)]
        kind = "view" if block.views else "function"
        message = (exc.diag.message_primary or str(exc)).strip()
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):  # e.g. a SET of a function: a superuser's
            detail = f"definition not compared: {message} (a superuser's DSN compares it)"
            found.append(Finding(kind, ", ".join(subjects), detail, "warning"))
            continue
        fails = f"its declaration in {block.where} fails here: {message}"
        missing = [i for i, f in enumerate(found) if f.subject in subjects and f.detail == "missing"]
        for i in missing:  # why it cannot simply be created
            found[i] = Finding(found[i].kind, found[i].subject, f"missing; {fails}")
        if not missing:
            found.append(Finding(kind, ", ".join(subjects), fails))
    for (kind, key), printed in sorted(after.items()):
        was = before.get((kind, key))
        if was == printed:
            continue
        declared = of_key.get((kind, key.split("(")[0]))
        where = declared.where if declared is not None else "sql/"
        if was is None:
            if key.split("(")[0] not in reported:  # a name that exists with other arguments
                found.append(Finding(kind, key, f"missing (declared in {where})"))
        elif not (kind == "trigger" and was[2] == "D" and was[:2] == printed[:2]):  # disabled: reported
            found.append(Finding(kind, key, _changed(kind, was, printed, where)))
    return found
