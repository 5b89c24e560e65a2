"""The operators pgmem declares leakproof so that an index serves them under row-level security.

Postgres applies the namespace's policy before any condition whose operator is not leakproof, so for the
application's role (``pgmem_app``) such a condition is never an index condition. pgmem's own operators over
built-in functions declared LEAKPROOF (``sql/leakproof.sql``) and GIN operator classes with them fix that
for the filters on JSON (``pgmem.@>``, migration 0016) and keyword search (``pgmem.@@``, migration 0027).

Only a superuser may declare a function LEAKPROOF or create an operator class. A lesser migrating role gets
each operator over a SQL function (the same results) and the index in its fallback operator class (or none),
which serves only roles that bypass row-level security. :func:`build` (every ``pgmem migrate`` and
``--repair`` runs it) builds what is missing when a superuser runs it; :func:`differences` is what
``pgmem doctor`` and the drift check say meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg
from psycopg import sql

from pgmem.ops.drift import Difference, Owner, raw, running

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["OPERATORS", "GinIndex", "LeakproofOperator", "build", "differences"]

SCHEMA = "pgmem"


@dataclass(frozen=True)
class GinIndex:
    """An index of the operator class: on ``table``'s ``column``; ``fallback``: its operator class where the
    leakproof one is missing (None: the index is built only with it)."""

    name: str
    table: str
    column: str
    fallback: str | None


@dataclass(frozen=True)
class LeakproofOperator:
    """One leakproof operator: its drift category, function, operator, operator class and indexes."""

    category: str
    subject: str  # the warning's subject
    serves: str  # what its index serves, in the warning
    function: str  # as to_regprocedure reads it
    name: str  # the function's name
    internal: LiteralString  # its declaration as sql/leakproof.sql writes it (a superuser's)
    fallback: LiteralString  # a lesser role's: the same results over SQL, not leakproof
    operator: str  # as to_regoperator reads it
    operator_ddl: LiteralString
    opclass: str
    opclass_ddl: LiteralString
    indexes: tuple[GinIndex, ...]

    def build(self, index: GinIndex, leakproof: bool) -> sql.Composed:
        """``index``, in the operator class (``leakproof``) or its fallback."""
        ops = sql.Identifier(SCHEMA, self.opclass) if leakproof else sql.Identifier(index.fallback or "")
        return sql.SQL("CREATE INDEX {} ON {} USING gin ({} {})").format(
            sql.Identifier(index.name), sql.Identifier(SCHEMA, index.table), sql.Identifier(index.column), ops
        )


OPERATORS = (
    LeakproofOperator(
        category="metadata filters",
        subject="metadata filters' index",
        serves="metadata filters",
        function="pgmem.jsonb_contains(jsonb,jsonb)",
        name="jsonb_contains",
        internal="CREATE OR REPLACE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean"
        " LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'jsonb_contains'",
        fallback="CREATE OR REPLACE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean"
        " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @> $2'",
        operator="pgmem.@>(jsonb,jsonb)",
        operator_ddl="CREATE OPERATOR pgmem.@> (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = pgmem.jsonb_contains, "
        "RESTRICT = matchingsel, JOIN = matchingjoinsel)",
        opclass="jsonb_contains_ops",
        opclass_ddl="""CREATE OPERATOR CLASS pgmem.jsonb_contains_ops FOR TYPE jsonb USING gin AS
    OPERATOR 7 pgmem.@>,
    FUNCTION 1 btint4cmp(int4, int4),
    FUNCTION 2 gin_extract_jsonb_path(jsonb, internal, internal),
    FUNCTION 3 gin_extract_jsonb_query_path(jsonb, internal, int2, internal, internal, internal, internal),
    FUNCTION 4 gin_consistent_jsonb_path(internal, int2, jsonb, int4, internal, internal, internal, internal),
    FUNCTION 6 gin_triconsistent_jsonb_path(internal, int2, jsonb, int4, internal, internal, internal),
    STORAGE int4""",
        indexes=(
            GinIndex("messages_metadata_idx", "messages", "metadata", None),
            GinIndex("items_value_idx", "items", "value", "jsonb_path_ops"),
        ),
    ),
    LeakproofOperator(
        category="keyword search",
        subject="keyword search's index",
        serves="keyword search",
        function="pgmem.ts_match(tsvector,tsquery)",
        name="ts_match",
        internal="CREATE OR REPLACE FUNCTION pgmem.ts_match(tsvector, tsquery) RETURNS boolean"
        " LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF AS 'ts_match_vq'",
        fallback="CREATE OR REPLACE FUNCTION pgmem.ts_match(tsvector, tsquery) RETURNS boolean"
        " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @@ $2'",
        operator="pgmem.@@(tsvector,tsquery)",
        operator_ddl="CREATE OPERATOR pgmem.@@ (LEFTARG = tsvector, RIGHTARG = tsquery, FUNCTION = pgmem.ts_match, "
        "RESTRICT = tsmatchsel, JOIN = tsmatchjoinsel)",
        opclass="tsvector_match_ops",
        opclass_ddl="""CREATE OPERATOR CLASS pgmem.tsvector_match_ops FOR TYPE tsvector USING gin AS
    OPERATOR 1 pg_catalog.@@ (tsvector, tsquery),
    OPERATOR 2 pg_catalog.@@@ (tsvector, tsquery),
    OPERATOR 3 pgmem.@@ (tsvector, tsquery),
    FUNCTION 1 gin_cmp_tslexeme(text, text),
    FUNCTION 2 gin_extract_tsvector(tsvector, internal, internal),
    FUNCTION 3 gin_extract_tsquery(tsvector, internal, int2, internal, internal, internal, internal),
    FUNCTION 4 gin_tsquery_consistent(internal, int2, tsvector, int4, internal, internal, internal, internal),
    FUNCTION 5 gin_cmp_prefix(text, text, int2, internal),
    FUNCTION 6 gin_tsquery_triconsistent(internal, int2, tsvector, int4, internal, internal, internal),
    STORAGE text""",
        indexes=(GinIndex("messages_tsv_idx", "messages", "tsv", "tsvector_ops"),),
    ),
)

_STATE = """
SELECT to_regprocedure(%(function)s) IS NOT NULL,
       coalesce((SELECT proleakproof FROM pg_proc WHERE oid = to_regprocedure(%(function)s)), false),
       to_regoperator(%(operator)s) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_opclass WHERE opcname = %(opclass)s AND opcnamespace = 'pgmem'::regnamespace)"""
_INDEX_OPCLASS = """
SELECT o.opcname::text FROM pg_index AS i JOIN pg_opclass AS o ON o.oid = i.indclass[0]
WHERE i.indexrelid = to_regclass(%(index)s)"""
_SUPERUSER = "SELECT coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false)"


@dataclass(frozen=True)
class _State:
    function: bool  # it exists
    leakproof: bool
    operator: bool
    opclass: bool
    indexes: dict[str, str | None]  # index name: its operator class (None: missing)


def _state(conn: psycopg.Connection[Any], op: LeakproofOperator) -> _State:
    params = {"function": op.function, "operator": op.operator, "opclass": op.opclass}
    row = conn.execute(_STATE, params).fetchone()
    assert row is not None
    indexes = {}
    for index in op.indexes:
        found = conn.execute(_INDEX_OPCLASS, {"index": f"{SCHEMA}.{index.name}"}).fetchone()
        indexes[index.name] = None if found is None else str(found[0])
    function, leakproof, operator, opclass = map(bool, row)
    return _State(function, leakproof, operator, opclass, indexes)


def build(connection: Connection) -> None:
    """What migrations 0016 and 0027 do only as a superuser (the leakproof functions, their GIN operator
    classes, the indexes), done where it is missing when a superuser runs it (every ``pgmem migrate`` and
    ``--repair``): a database a lesser role migrated gets them from the next superuser's run. A no-op for
    another role, and for an operator whose migration has not run."""
    conn = raw(connection)
    if conn.execute(_SUPERUSER).fetchone() != (True,):
        return
    for op in OPERATORS:
        state = _state(conn, op)
        if not state.function:
            continue
        if not state.leakproof:
            conn.execute(op.internal)
        if not state.opclass:
            conn.execute(op.opclass_ddl)
        for index in op.indexes:
            if state.indexes[index.name] != op.opclass:
                conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(SCHEMA, index.name)))
                conn.execute(op.build(index, leakproof=True))


def differences(conn: psycopg.Connection[Any], who: Owner) -> Iterator[Difference]:
    """How each operator's function, operator, operator class and indexes differ from their migration's."""
    for op in OPERATORS:
        yield from _operator(conn, who, op)


def _operator(conn: psycopg.Connection[Any], who: Owner, op: LeakproofOperator) -> Iterator[Difference]:
    state = _state(conn, op)

    def declare(connection: Connection) -> None:
        now = _state(raw(connection), op)
        if not now.function:
            raw(connection).execute(op.internal if who.superuser else op.fallback)
        if not now.operator:
            raw(connection).execute(op.operator_ddl)

    if not state.function:
        yield Difference(op.category, op.function.replace(",", ", "), "missing", fix=declare)
    if not state.operator:
        yield Difference(op.category, op.operator.replace(",", ", "), "missing", fix=declare)
    superuser_only = []
    if state.function and not state.leakproof:
        superuser_only.append(f"pgmem.{op.name} is not LEAKPROOF")
    if not state.opclass:
        superuser_only.append(f"operator class pgmem.{op.opclass} missing")
    for index in op.indexes:
        current = state.indexes[index.name]
        if current is None and index.fallback is not None:
            fix = running(op.build(index, leakproof=state.opclass))
            yield Difference(op.category, f"pgmem.{index.name}", "missing", fix=fix)
        elif current is None:
            superuser_only.append(f"pgmem.{index.name} missing")
        elif current != op.opclass:
            superuser_only.append(f"pgmem.{index.name} uses {current}")
    if superuser_only:
        detail = (
            f"{'; '.join(superuser_only)}: no index serves {op.serves} under row-level security (only a "
            "superuser may build it): run `pgmem migrate` once as a superuser"
        )
        yield Difference(op.category, op.subject, detail, "warning")
