"""``pgmem export`` and ``pgmem import``: one namespace's rows as JSON lines, into another database or namespace.

The file: a header line (format, pgmem version, schema revision, namespace, memories, export time), then one
line per row, ``{"type": ..., "row": {column: value}, ...}``, in the order the rows are imported (what a row
refers to comes before it). Each table's columns come from the schema declaration (pgmem/ops/schema.py), so
a column added to a table is carried without a change here, and so is a new table of namespace-scoped rows
(:func:`plan`). What a row's value is:

* every column but ``namespace``, the columns Postgres computes (``tsv``) and identity columns (``seq``,
  ``id``: the target draws its own; the order they give is the order of the lines);
* JSON as it is stored (Postgres writes and reads the text: numbers keep their digits), timestamps in UTC
  with their microseconds, ``bytea`` as base64, arrays as lists;
* a vector as the list of its floats as pgvector prints them (the shortest decimal that reads back as the
  same float4 / float2), with its model by name, dimension and distance (model ids differ between databases);
* a memory entry's ``seq`` as its ``order`` (1, 2, ... over the namespace's entries), and every other column
  named ``*seq`` (a summary's range, a BrainMemory's cut, a fork's or a mark's point: ``memory_entries.seq``
  values) as a position among them, under ``"seqs"``: ``first_*`` columns as the position of the first entry
  at or after the value, the others of the last entry at or before it (0: before every entry).

Not exported (:data:`NOT_EXPORTED`): logs and audit trails, state derived from the rows (rebuilt by the
import's triggers), secrets and keys of the namespace, and rows that name embedding models by id other than
embeddings and memory models.
"""

from __future__ import annotations

import base64
import binascii
import json
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from sqlalchemy import Column, Table, Text
from sqlalchemy.dialects.postgresql import BYTEA
from sqlalchemy.types import LargeBinary

from pgmem.errors import Conflict, InvalidInput, NotFound, translate
from pgmem.ops import schema

__all__ = ["FORMAT", "NOT_EXPORTED", "Imported", "export", "import_lines", "plan"]

#: The file format's version; an import refuses a newer one.
FORMAT = 1

#: Tables whose rows an export leaves out, and why (``pgmem export --help``, README).
NOT_EXPORTED: dict[str, str] = {
    "memory_counts": "derived: the import's triggers count the entries",
    "vector_log": "a log, rebuilt by the import's triggers (FAISS caches replay it)",
    "embedding_outbox": "derived: the import queues again what has no vector yet",
    "doorbell": "transient wake-ups",
    "namespace_keys": "the namespace's notification key: the target makes its own",
    "queue_archive_batches": "acknowledged queue items (history)",
    "queue_archive_refs": "acknowledged queue items (history)",
    "idempotency_keys": "keys of retried writes, short-lived",
    "retrieval_log": "a log of searches",
    "forget_audit": "the audit of forgetting",
    "recall_samples": "a log of sampled searches",
    "item_vectors": "items' vectors (model ids): items are put again to embed them",
}

#: Columns derived from other rows, left out: a memory's vector revision (the vector log's head).
_DERIVED = {"memories": frozenset({"vec_rev"})}

_BATCH = 500


@dataclass(frozen=True)
class _Kind:
    """One line type: its table, the columns under ``"row"``, and those moved to ``"seqs"``."""

    type: str
    table: Table
    columns: tuple[Column[Any], ...]
    seqs: tuple[str, ...] = ()
    namespace_only: bool = False  # a whole-namespace export only (not with --memory)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns)


def _exported_columns(table: Table, *leave: str) -> tuple[Column[Any], ...]:
    out = []
    for column in table.columns:
        if column.name == "namespace" or column.computed is not None or column.identity is not None:
            continue
        if column.name in _DERIVED.get(table.name, ()) or column.name in leave:
            continue
        out.append(column)
    return tuple(out)


def _seq_columns(table: Table) -> tuple[str, ...]:
    return tuple(
        c.name
        for c in table.columns
        if c.name.endswith("seq") and c.identity is None and table.name not in ("messages", "memory_entries")
    )


def _names_a_model(table: Table) -> bool:
    return "model_id" in table.c or any(
        fk.referred_table.name == "embedding_models" for fk in table.foreign_key_constraints
    )


def plan() -> tuple[_Kind, ...]:
    """The line types, in the order an export writes them and an import needs them."""
    t = schema.metadata.tables
    known = [
        _Kind("memory", t["pgmem.memories"], _exported_columns(t["pgmem.memories"])),
        _Kind("message", t["pgmem.messages"], _exported_columns(t["pgmem.messages"])),
        _Kind(
            "embedding",
            t["pgmem.embeddings"],
            _exported_columns(t["pgmem.embeddings"], "model_id", "embedding", "embedding_half"),
        ),
        _Kind("memory_model", t["pgmem.memory_models"], _exported_columns(t["pgmem.memory_models"], "model_id")),
        _Kind("entry", t["pgmem.memory_entries"], _exported_columns(t["pgmem.memory_entries"])),
    ]
    named = {k.table.name for k in known}
    rest = [
        table
        for table in schema.metadata.sorted_tables
        if table.name not in named
        and table.name not in NOT_EXPORTED
        and "namespace" in table.c
        and not _names_a_model(table)
    ]
    types = {"summaries": "summary", "queue_items": "queue_item", "items": "item"}
    for table in rest:
        seqs = _seq_columns(table)
        known.append(
            _Kind(
                types.get(table.name, table.name),
                table,
                tuple(c for c in _exported_columns(table) if c.name not in seqs),
                seqs,
                namespace_only=not _memory_columns(table),
            )
        )
    return tuple(known)


def _memory_columns(table: Table) -> tuple[str, ...]:
    """The columns of ``table`` naming a memory (its foreign keys to pgmem.memories)."""
    return tuple(
        c.parent.name
        for fk in table.foreign_key_constraints
        if fk.referred_table.name == "memories"
        for c in fk.elements
        if c.parent.name != "namespace"
    )


# -- export ---------------------------------------------------------------------------------------------------------


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


def _table(kind: _Kind) -> sql.Composable:
    return sql.Identifier(schema.SCHEMA, kind.table.name)


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


# -- import ---------------------------------------------------------------------------------------------------------


@dataclass
class Imported:
    """What an import wrote: lines read and rows per line type."""

    lines: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    models: list[tuple[str, int, str]] = field(default_factory=list)  # registered: (name, dimension, distance)


@dataclass
class _Pending:
    kind: _Kind
    first_line: int
    rows: list[str] = field(default_factory=list)  # each line's "row", as JSON text
    extra: list[dict[str, Any]] = field(default_factory=list)  # per row: seqs overrides, model ids, ...


def _bad(line: int, what: str) -> InvalidInput:
    return InvalidInput(f"line {line}: {what} (nothing was imported)")


def _check_header(line: int, text: str) -> dict[str, Any]:
    from pgmem.revision import is_known

    try:
        header = json.loads(text)
    except ValueError as exc:
        raise _bad(line, f"not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("type") != "header":
        raise _bad(line, "the first line must be the export's header (pgmem export writes it)")
    fmt = header.get("format")
    if not isinstance(fmt, int):
        raise _bad(line, "the header has no format version")
    if fmt > FORMAT:
        raise _bad(line, f"the file is of format {fmt}, from a newer pgmem: this one reads format {FORMAT}")
    revision = header.get("revision")
    if not isinstance(revision, str) or not is_known(revision):
        raise _bad(line, f"the file comes from schema revision {revision!r}, newer than this pgmem's: upgrade it")
    if not isinstance(header.get("namespace"), str):
        raise _bad(line, "the header names no namespace")
    return header


def _parse(line: int, text: str, kinds: dict[str, _Kind]) -> tuple[_Kind, dict[str, Any]]:
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise _bad(line, f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise _bad(line, "not a JSON object")
    kind = kinds.get(record.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise _bad(line, f"unknown type {record.get('type')!r} (known: {', '.join(kinds)})")
    row = record.get("row")
    if not isinstance(row, dict):
        raise _bad(line, f'{kind.type}: no "row" object')
    if missing := sorted(kind.fields - row.keys()):
        raise _bad(line, f"{kind.type}: missing field(s) {', '.join(missing)}")
    if unknown := sorted(row.keys() - kind.fields):
        raise _bad(line, f"{kind.type}: unknown field(s) {', '.join(unknown)} (a column this schema lacks)")
    if kind.seqs:
        seqs = record.get("seqs")
        if not isinstance(seqs, dict) or set(seqs) != set(kind.seqs):
            raise _bad(line, f'{kind.type}: "seqs" must name {", ".join(kind.seqs)}')
        if any(v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0) for v in seqs.values()):
            raise _bad(line, f'{kind.type}: positions in "seqs" are whole numbers from 0')
    for column in kind.columns:
        value = row[column.name]
        if value is None and not column.nullable:
            raise _bad(line, f"{kind.type}: {column.name} may not be null")
        if isinstance(column.type, LargeBinary | BYTEA) and value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise _bad(line, f"{kind.type}: {column.name} is not base64") from None
    if kind.table.name in ("embeddings", "memory_models"):
        model = record.get("model")
        if (
            not isinstance(model, dict)
            or not isinstance(model.get("name"), str)
            or not isinstance(model.get("dimension"), int)
            or not isinstance(model.get("distance"), str)
        ):
            raise _bad(line, f'{kind.type}: "model" must be {{name, dimension, distance}}')
        if not 1 <= model["dimension"] <= 16000:
            raise _bad(line, f"{kind.type}: a model's dimension is in [1, 16000], got {model['dimension']}")
    if kind.table.name == "embeddings":
        vector = record.get("vector")
        if not isinstance(vector, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in vector
        ):
            raise _bad(line, 'embedding: "vector" must be a list of numbers')
        if len(vector) != record["model"]["dimension"]:
            raise _bad(
                line,
                f"embedding: the vector has {len(vector)} dimensions, model {record['model']['name']!r} has "
                f"{record['model']['dimension']}",
            )
    if kind.table.name == "memory_entries" and not isinstance(record.get("order"), int):
        raise _bad(line, 'entry: no "order"')
    return kind, record


class _Importer:
    """Inserts one file's rows in the caller's transaction, a batch of lines of one type at a time."""

    def __init__(self, conn: psycopg.Connection[Any], namespace: str) -> None:
        from pgmem.planning import statements

        self.conn = conn
        self.namespace = namespace
        self.entry_seqs: array[int] = array("q")  # the new seq of the entry of each order
        self.models: dict[tuple[str, int, str], tuple[int, str]] = {}
        self.done = Imported()
        self.vectors_q = statements.load("vectors")

    def model(self, line: int, model: dict[str, Any]) -> tuple[int, str]:
        """The target's id and storage kind of a model (registered when the target lacks it)."""
        from pgmem.planning.search import storage_kind

        key = (model["name"], model["dimension"], model["distance"])
        if key not in self.models:
            args = {"name": key[0], "dimension": key[1], "distance": key[2], "kind": storage_kind(key[1])}
            if key[2] not in ("cosine", "l2", "inner_product"):
                raise _bad(line, f"unknown distance {key[2]!r} (cosine, l2, inner_product)")
            self.conn.execute(self.vectors_q["register_model"], args)
            row = self.conn.execute(self.vectors_q["get_model"], args).fetchone()
            assert row is not None
            self.models[key] = (int(row[0]), str(row[3]))
            self.done.models.append(key)
        return self.models[key]

    def add(self, pending: _Pending, line: int, record: dict[str, Any]) -> None:
        kind = pending.kind
        extra: dict[str, Any] = {}
        if kind.seqs:
            extra["seqs"] = {s: self._seq(line, s.startswith("first"), v) for s, v in record["seqs"].items()}
        if kind.table.name in ("embeddings", "memory_models"):
            extra["model"], extra["kind"] = self.model(line, record["model"])
        if kind.table.name == "embeddings":
            extra["vector"] = json.dumps(record["vector"])
        if kind.table.name == "memory_entries" and record["order"] != len(self.entry_seqs) + len(pending.rows) + 1:
            raise _bad(line, f"entry: order {record['order']} out of sequence (lines were reordered or dropped)")
        pending.rows.append(record["\0raw"] or json.dumps(record["row"], ensure_ascii=False))
        pending.extra.append(extra)

    def _seq(self, line: int, first: bool, position: int | None) -> int | None:
        if position is None:
            return None
        n = len(self.entry_seqs)
        if position == 0:
            return 0
        if position > n:
            if first and position == n + 1:
                return (self.entry_seqs[-1] + 1) if n else 1  # after every entry
            raise _bad(line, f"position {position} is past the {n} entries before it")
        return self.entry_seqs[position - 1]

    def flush(self, pending: _Pending) -> None:
        if not pending.rows:
            return
        kind = pending.kind
        last_line = pending.first_line + len(pending.rows) - 1
        columns = [c.name for c in kind.columns]
        values: list[sql.Composable] = [sql.SQL("%(ns)s")]
        for column in kind.columns:  # bytea comes as base64: decoded here (the record's own parse is not used)
            if isinstance(column.type, LargeBinary | BYTEA):
                values.append(sql.SQL("decode(j.x ->> {}, 'base64')").format(sql.Literal(column.name)))
            else:
                values.append(sql.Identifier("r", column.name))
        names = ["namespace", *columns]
        source = sql.SQL("j.x")
        if kind.seqs:
            source = sql.SQL("j.x || (j.extra -> 'seqs')")
            names += kind.seqs
            values += [sql.Identifier("r", s) for s in kind.seqs]
        if kind.table.name in ("embeddings", "memory_models"):
            names.append("model_id")
            values.append(sql.SQL("(j.extra ->> 'model')::smallint"))
        if kind.table.name == "embeddings":
            names += ["embedding", "embedding_half"]
            values += [
                sql.SQL("CASE WHEN j.extra ->> 'kind' = 'vector' THEN (j.extra ->> 'vector')::vector END"),
                sql.SQL("CASE WHEN j.extra ->> 'kind' = 'halfvec' THEN (j.extra ->> 'vector')::halfvec END"),
            ]
        keys = [c for c in kind.table.primary_key.columns if c.name != "namespace"]
        identity_key = any(c.identity is not None for c in keys) or "model_id" in {c.name for c in keys}
        returning: list[sql.Composable] = [sql.Identifier(c.name) for c in keys] or [sql.SQL("1")]
        statement = sql.SQL(
            "INSERT INTO {} ({}) SELECT {} FROM unnest(%(rows)s::jsonb[], %(extra)s::jsonb[]) WITH ORDINALITY "
            "AS j(x, extra, n) CROSS JOIN LATERAL jsonb_populate_record(NULL::{}, {}) AS r ORDER BY j.n "
            "ON CONFLICT DO NOTHING RETURNING {}"
        ).format(
            _table(kind),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(values),
            _table(kind),
            source,
            sql.SQL(", ").join(returning),
        )
        if kind.table.name == "memory_entries":
            statement = sql.SQL("{}, seq").format(statement)
        params = {"ns": self.namespace, "rows": pending.rows, "extra": [json.dumps(e) for e in pending.extra]}
        where = f"lines {pending.first_line}-{last_line}" if last_line > pending.first_line else f"line {last_line}"
        try:
            with self.conn.transaction():  # a savepoint: the error is named, then the whole import rolls back
                returned = self.conn.execute(statement, params).fetchall()
        except psycopg.errors.ForeignKeyViolation as exc:
            raise InvalidInput(
                f"{where}: {kind.type} refers to a row the file does not hold before it ({_detail(exc)}); "
                "nothing was imported"
            ) from None
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
            raise InvalidInput(f"{where}: {kind.type}: {_detail(exc)}; nothing was imported") from None
        if len(returned) < len(pending.rows):
            raise Conflict(self._conflict(kind, pending, returned, keys, identity_key, where))
        if kind.table.name == "memory_entries":
            self.entry_seqs.extend(sorted(int(r[-1]) for r in returned))
        self.done.rows[kind.type] = self.done.rows.get(kind.type, 0) + len(returned)
        pending.rows.clear()
        pending.extra.clear()

    def _conflict(
        self,
        kind: _Kind,
        pending: _Pending,
        returned: list[tuple[Any, ...]],
        keys: list[Column[Any]],
        identity_key: bool,
        where: str,
    ) -> str:
        tail = f"already in namespace {self.namespace!r}; nothing was imported (import into an empty namespace)"
        if keys and not identity_key:
            got = {tuple(_hashable(v) for v in r[: len(keys)]) for r in returned}
            for i, text in enumerate(pending.rows):
                row = json.loads(text)
                key = tuple(_hashable(row[c.name]) for c in keys)
                if key not in got:
                    named = ", ".join(f"{c.name} {row[c.name]!r}" for c in keys)
                    return f"line {pending.first_line + i}: {kind.type} with {named} is {tail}"
        return f"{where}: {len(pending.rows) - len(returned)} {kind.type} row(s) {tail}"


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _detail(exc: psycopg.Error) -> str:
    diag = exc.diag
    return (diag.message_primary or str(exc)).strip() + (f" ({diag.message_detail})" if diag.message_detail else "")


def _raw_row(text: str) -> str | None:
    """The text of a line's top-level ``"row"`` value as written (numbers keep their digits), or None."""
    decoder = json.JSONDecoder()

    def space(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        return at

    at = space(0)
    if text[at : at + 1] != "{":
        return None
    at = space(at + 1)
    while at < len(text) and text[at] != "}":
        try:
            key, at = decoder.raw_decode(text, at)
            at = space(at)
            if text[at : at + 1] != ":":
                return None
            start = space(at + 1)
            _, at = decoder.raw_decode(text, start)
        except ValueError:
            return None
        if key == "row":
            return text[start:at]
        at = space(at)
        if text[at : at + 1] == ",":
            at = space(at + 1)
    return None


def import_lines(
    conn: psycopg.Connection[Any], lines: Iterable[str], *, namespace: str | None = None
) -> tuple[str, Imported]:
    """Import an export's lines into ``namespace`` (default: the header's) on ``conn``, inside the caller's
    transaction (scoped to that namespace): a bad line raises and the caller's rollback leaves nothing.

    Returns the namespace and what was written.

    Raises:
        InvalidInput: a line is not JSON, of an unknown type, lacks a field, has a vector of the wrong
            dimension, or the header is missing or from a newer format or schema; the message names the line.
        Conflict: a row already exists in the namespace (a message id, a memory key, an item).
    """
    kinds = {k.type: k for k in plan()}
    stream: Iterator[str] = iter(lines)
    number = 0
    header: dict[str, Any] | None = None
    for text in stream:
        number += 1
        header = _check_header(number, text)
        break
    if header is None:
        raise InvalidInput("the file is empty: nothing was imported")
    target = namespace or header["namespace"]
    if namespace is None:
        from pgmem.checks import check_namespace

        check_namespace(target)
    with translate():
        importer = _Importer(conn, target)
        pending: _Pending | None = None
        for text in stream:
            number += 1
            if not text.strip():
                continue
            kind, record = _parse(number, text, kinds)
            record["\0raw"] = _raw_row(text)
            if pending is None or pending.kind is not kind or len(pending.rows) >= _BATCH:
                if pending is not None:
                    importer.flush(pending)
                pending = _Pending(kind, number)
            importer.add(pending, number, record)
        if pending is not None:
            importer.flush(pending)
    importer.done.lines = number
    return target, importer.done


def read_lines(source: IO[str]) -> Iterator[str]:
    """The lines of ``source`` without their line ends."""
    for text in source:
        yield text.rstrip("\r\n")


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


def import_file(dsn: str, source: IO[str], *, namespace: str | None = None) -> tuple[str, Imported]:
    """``pgmem import``: :func:`import_lines` in one transaction of a client of the target namespace (the
    header's unless ``namespace``), then the HNSW index of each model it registered (outside it)."""
    import pgmem
    from pgmem.checks import check_namespace
    from pgmem.embeddings import Precomputed

    if namespace is not None:
        check_namespace(namespace)
    lines = read_lines(source)
    first = next(lines, None)
    if first is None or not first.strip():
        raise InvalidInput("the file is empty: nothing was imported")
    target = namespace or _check_header(1, first)["namespace"]
    check_namespace(target)
    with pgmem.connect(dsn, namespace=target, min_size=0, max_size=1) as client:
        with client.transaction() as conn:
            _, done = import_lines(conn, _chain(first, lines), namespace=target)
        for name, dimension, distance in done.models:  # the HNSW index the transaction could not build
            client.vectors.model(Precomputed(name, dimension), distance=distance)
    return target, done


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


def import_from(dsn: str, source: str, *, namespace: str | None = None) -> tuple[str, Imported]:
    """``pgmem import``: from the file ``source`` (``-``: standard input)."""
    import sys

    if source == "-":
        return import_file(dsn, sys.stdin, namespace=namespace)
    try:
        with Path(source).open(encoding="utf-8") as file:
            return import_file(dsn, file, namespace=namespace)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {source}: {exc}") from None


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest
