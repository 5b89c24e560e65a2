"""``pgmem import`` (:mod:`pgmem.ops.portability`, whose doc describes the file): an export's lines checked
and inserted in one transaction, a batch of lines of one type at a time; a bad line imports nothing."""

from __future__ import annotations

import base64
import binascii
import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from sqlalchemy import Column
from sqlalchemy.dialects.postgresql import BYTEA
from sqlalchemy.types import LargeBinary

from pgmem.errors import Conflict, InvalidInput, translate
from pgmem.ops.export_format import FORMAT, _Kind, _table, plan

__all__ = ["Imported", "import_file", "import_from", "import_lines", "read_lines"]

_BATCH = 500


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
    if unknown := sorted(row.keys() - kind.fields - kind.ignored):
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
        self.portability_q = statements.load("portability")
        self.versions: list[int] = []  # the item_history ids inserted, given their item ids at the end

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
        if kind.table.name == "item_history":  # its item's id, given by item_ids once every item is in
            names.append("item_id")
            values.append(sql.SQL("0"))
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
        if kind.table.name == "item_history":
            self.versions.extend(int(r[-1]) for r in returned)  # its key: (path, key, id)
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

    def item_ids(self) -> None:
        """The item id of each item version imported: its item's in the target (sql/portability.sql
        ``item_history_ids``), once the file's items are in (a file of format 1 written before it left
        item_id out has the versions first)."""
        if self.versions:
            self.conn.execute(self.portability_q["item_history_ids"], {"ns": self.namespace, "ids": self.versions})


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
        importer.item_ids()
    importer.done.lines = number
    return target, importer.done


def read_lines(source: IO[str]) -> Iterator[str]:
    """The lines of ``source`` without their line ends."""
    for text in source:
        yield text.rstrip("\r\n")


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
