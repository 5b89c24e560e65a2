"""``pgmem export`` (:mod:`pgmem.ops.portability`, whose doc describes the file): one namespace's rows, or
some memories', written as JSON lines from one snapshot."""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left, bisect_right
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from sqlalchemy import Text
from sqlalchemy.dialects.postgresql import BYTEA
from sqlalchemy.types import LargeBinary

from pgmem.errors import NotFound, translate
from pgmem.ops import schema
from pgmem.ops.export_format import FORMAT, NOT_EXPORTED, _Kind, _memory_columns, _table, plan

__all__ = ["export", "export_namespace", "export_to"]


def _select_list(kind: _Kind, alias: str) -> sql.Composable:
    """``to_jsonb`` of the row's exported columns: bytea as base64 (unwrapped), the rest as Postgres writes it."""
    items = []
    for column in kind.columns:
        ref = sql.Identifier(alias, column.name)
        if isinstance(column.type, LargeBinary | BYTEA):
            value: sql.Composable = sql.SQL("translate(encode({}, 'base64'), E'\\n', '')").format(ref)
        else:
            value = ref
        items.append(sql.SQL("{}, {}").format(sql.Literal(column.name), value))
    if not items:
        return sql.SQL("'{}'::jsonb")
    return sql.SQL("jsonb_build_object({})").format(sql.SQL(", ").join(items))


def _in_memories(column: sql.Composable) -> sql.Composable:
    return sql.SQL("({} = ANY(%(memories)s))").format(column)


def _holds(alias: str, message_column: str) -> sql.Composable:
    """The row's message is held by one of the exported memories."""
    return sql.SQL(
        "EXISTS (SELECT 1 FROM pgmem.memory_entries AS e WHERE e.namespace = %(ns)s AND e.message_id = {} "
        "AND e.memory = ANY(%(memories)s))"
    ).format(sql.Identifier(alias, message_column))


def _query(kind: _Kind, subset: bool) -> sql.Composed:
    """The export query of ``kind``: ``(line without "seqs", {seq column: value})`` per row, in line order."""
    t = sql.Identifier("t")
    base = sql.SQL("jsonb_build_object('type', {}, 'row', {})").format(sql.Literal(kind.type), _select_list(kind, "t"))
    seqs: sql.Composable = (
        sql.SQL("jsonb_build_object({})").format(
            sql.SQL(", ").join(sql.SQL("{}, {}").format(sql.Literal(s), sql.Identifier("t", s)) for s in kind.seqs)
        )
        if kind.seqs
        else sql.SQL("jsonb_build_object('seq', t.seq)")
        if kind.table.name == "memory_entries"
        else sql.SQL("NULL::jsonb")
    )
    where: list[sql.Composable] = [sql.SQL("t.namespace = %(ns)s")]
    joins: sql.Composable = sql.SQL("")
    name = kind.table.name
    if name == "embeddings" or name == "memory_models":
        joins = sql.SQL(" JOIN pgmem.embedding_models AS m ON m.id = t.model_id")
        model = sql.SQL("jsonb_build_object('name', m.name, 'dimension', m.dimension, 'distance', m.distance)")
        base = sql.SQL("{} || jsonb_build_object('model', {})").format(base, model)
    if name == "embeddings":
        joins = sql.SQL("{} JOIN pgmem.messages AS g ON g.namespace = %(ns)s AND g.id = t.message_id").format(joins)
        vector = sql.SQL("coalesce(t.embedding::text, t.embedding_half::text)::jsonb")
        base = sql.SQL("{} || jsonb_build_object('vector', {})").format(base, vector)
        order: sql.Composable = sql.SQL('m.name COLLATE "C", m.dimension, m.distance, g.seq')
    elif name == "memory_models":
        order = sql.SQL('t.memory COLLATE "C", m.name COLLATE "C", m.dimension, m.distance')
    elif name == "memory_entries":
        order = sql.SQL("t.seq")
    elif name == "messages":
        order = sql.SQL("t.seq")
    else:
        keys = [c for c in kind.table.primary_key.columns if c.name != "namespace"]
        order = sql.SQL(", ").join(
            sql.SQL('{} COLLATE "C"').format(sql.Identifier("t", c.name))
            if isinstance(c.type, Text)
            else sql.Identifier("t", c.name)
            for c in keys
        )
    if subset:
        if name == "memories":
            where.append(_in_memories(sql.Identifier("t", "key")))
        elif name in ("messages", "embeddings"):
            where.append(_holds("t", "id" if name == "messages" else "message_id"))
        else:
            where.extend(_in_memories(sql.Identifier("t", c)) for c in _memory_columns(kind.table))
    return sql.SQL("SELECT ({})::text, {} FROM {} AS {}{} WHERE {} ORDER BY {}").format(
        base, seqs, _table(kind), t, joins, sql.SQL(" AND ").join(where), order
    )


def _position(seqs: array[int], value: int | None, first: bool) -> int | None:
    """A ``memory_entries.seq`` value as a position among the exported entries (see the module's doc)."""
    if value is None:
        return None
    return bisect_left(seqs, value) + 1 if first else bisect_right(seqs, value)


def export(
    conn: psycopg.Connection[Any],
    namespace: str,
    out: IO[str],
    *,
    memories: list[str] | None = None,
    version: str,
    revision: str,
) -> int:
    """Write ``namespace``'s rows to ``out`` as JSON lines (the module's doc); return the lines written.

    ``conn`` is a connection of the namespace's client (row-level security), idle: the export reads one
    snapshot (a repeatable-read, read-only transaction), streaming each table through a server-side cursor.
    ``memories``: only these memories, the messages they hold, their vectors and summaries (no queue items,
    no items).

    Raises:
        NotFound: a memory of ``memories`` does not exist.
    """
    subset = memories is not None
    params = {"ns": namespace, "memories": memories or []}
    was = conn.isolation_level, conn.read_only
    conn.isolation_level, conn.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
    written = 0
    try:
        with translate(), conn.transaction():
            conn.execute("SET LOCAL TimeZone = 'UTC'")
            conn.execute("SET LOCAL extra_float_digits = 1")  # the shortest text that reads back the same float
            if subset:
                found = {
                    r[0]
                    for r in conn.execute(
                        "SELECT key FROM pgmem.memories WHERE namespace = %(ns)s AND key = ANY(%(memories)s)", params
                    )
                }
                if missing := [m for m in memories or () if m not in found]:
                    raise NotFound(f"namespace {namespace!r} has no memory {', '.join(map(repr, missing))}")
            header = {
                "type": "header",
                "format": FORMAT,
                "pgmem": version,
                "revision": revision,
                "namespace": namespace,
                "memories": memories,
                "exported_at": datetime.now(UTC).isoformat(),
                "not_exported": sorted(t for t in NOT_EXPORTED if f"{schema.SCHEMA}.{t}" in schema.metadata.tables),
            }
            out.write(json.dumps(header, ensure_ascii=False) + "\n")
            written += 1
            entry_seqs: array[int] = array("q")
            for kind in plan():
                if subset and kind.namespace_only:
                    continue
                with conn.cursor(name=f"pgmem_export_{kind.type}") as cur:
                    cur.itersize = 2000
                    cur.execute(_query(kind, subset), params)
                    if kind.table.name == "memory_entries":
                        written += _entries(cur, out, entry_seqs)
                        continue
                    for line, seqs in cur:
                        if seqs is not None:
                            moved = {s: _position(entry_seqs, v, s.startswith("first")) for s, v in seqs.items()}
                            line = f'{line[:-1]}, "seqs": {json.dumps(moved)}}}'
                        out.write(line + "\n")
                        written += 1
    finally:
        conn.isolation_level, conn.read_only = was
    return written


def _entries(cur: Any, out: IO[str], seqs: array[int]) -> int:
    """The entries' lines, with their order (1, 2, ...); ``seqs`` collects their seq values, in order."""
    written = 0
    for line, raw in cur:
        seqs.append(int(raw["seq"]))
        written += 1
        out.write(f'{line[:-1]}, "order": {written}}}\n')
    return written


def export_namespace(dsn: str, namespace: str, out: IO[str], *, memories: list[str] | None = None) -> int:
    """``pgmem export``: :func:`export` through a client of ``namespace`` (its role, row-level security)."""
    import pgmem
    from pgmem.checks import check_key, check_namespace
    from pgmem.revision import SCHEMA_REVISION

    check_namespace(namespace)
    for memory in memories or ():
        check_key(memory)
    with pgmem.connect(dsn, namespace=namespace, min_size=0, max_size=1) as client, client.connection() as conn:
        return export(conn, namespace, out, memories=memories, version=pgmem.__version__, revision=SCHEMA_REVISION)


def export_to(dsn: str, namespace: str, out: Path | None, *, memories: list[str] | None = None) -> int:
    """``pgmem export -o``: to ``out`` (standard output when None), through a ``.partial`` file renamed when
    the export is whole; return the lines written."""
    import sys

    if out is None:
        return export_namespace(dsn, namespace, sys.stdout, memories=memories)
    partial = out.with_name(out.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as file:
            written = export_namespace(dsn, namespace, file, memories=memories)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)
    return written
