"""Tables, columns, indexes and constraints against pgmem/ops/schema.py (pgmem.ops.drift).

Alembic's autogenerate comparison, configured as migrations/env.py (and as the test that asserts it finds
nothing after ``upgrade head``): types, nullability, server defaults, comments, indexes by name and
definition, unique constraints, foreign keys. It does not see CHECK constraints, UNLOGGED or storage
parameters: those are read here from the catalog.

Each difference carries its fix, built from the declaration and never one that loses data: what is missing
is created (a missing table with its indexes, a column with its default), pgmem's own index or constraint
of another definition is built again (neither holds data), nullability and defaults are set; a column of
another type is reported and left (converting it may lose data: do it by hand), and whatever the
declaration does not know is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from sqlalchemy import CheckConstraint, Column, Index, MetaData, Table
from sqlalchemy.schema import AddConstraint, Constraint

from pgmem.ops.drift import Difference, Fix, raw, running
from pgmem.ops.schema import SCHEMA, metadata

if TYPE_CHECKING:
    from alembic.operations import Operations
    from sqlalchemy.engine import Connection

    from pgmem.ops.drift_code import Snapshot

__all__ = ["FILTER_INDEXES", "RUNTIME_INDEXES", "differences", "recompute_tsv"]

#: Indexes built at run time, one per embedding model (pgmem.vectors, client.items): not declared, not drift.
RUNTIME_INDEXES = ("embeddings_hnsw_m", "item_vectors_hnsw_m")
#: The indexes whose operator class only a superuser creates (metadata filters, migration 0016; keyword
#: search, 0027): checked with their leakproof operators (pgmem.ops.drift_access).
FILTER_INDEXES = ("messages_metadata_idx", "items_value_idx", "messages_tsv_idx")
_LEFT = "not declared by pgmem (left as it is)"
#: Indexes an earlier revision of pgmem made and a later one dropped, which a revision that ran as a
#: placeholder left in place: drift, dropped by the repair. embedding_models_name_key (0001, dropped by
#: 0005) makes a model's name unique alone, so the same model with another dimension or distance fails.
RETIRED_INDEXES = frozenset({"embedding_models_name_key"})


def _include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    if type_ == "table" and name == "alembic_version":
        return False
    if type_ == "index" and name in FILTER_INDEXES:
        return False
    return not (type_ == "index" and reflected and (name or "").startswith(RUNTIME_INDEXES))


def _include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    return type_ != "schema" or name == SCHEMA  # nothing outside schema pgmem is reflected


def _ops(connection: Connection) -> Operations:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    return Operations(MigrationContext.configure(connection))


def _declared(name: str) -> Table:
    return metadata.tables[f"{SCHEMA}.{name}"]


def _create_tables(names: list[str]) -> Fix:
    def fix(connection: Connection) -> None:
        # A copy of the declaration without the filters' indexes, whose operator class only a superuser
        # creates (the filters' own fix builds them, or their fallback).
        copy = MetaData(schema=SCHEMA)
        for table in metadata.tables.values():
            copied = table.to_metadata(copy)
            copied._prefixes = list(table._prefixes)  # UNLOGGED (to_metadata drops it)
            for index in [i for i in copied.indexes if i.name in FILTER_INDEXES]:
                copied.indexes.discard(index)
        copy.create_all(connection, tables=[copy.tables[f"{SCHEMA}.{n}"] for n in names], checkfirst=True)

    return fix


def _add_column(table: str, column: Column[Any]) -> Fix:
    return lambda connection: _ops(connection).add_column(table, column._copy(), schema=SCHEMA)


def _alter(table: str, column: str, kw: dict[str, Any], **change: Any) -> Fix:
    return lambda connection: _ops(connection).alter_column(table, column, schema=SCHEMA, **kw, **change)


def _table_comment(name: str) -> Fix:
    def fix(connection: Connection) -> None:
        comment = _declared(name).comment
        if comment:
            _ops(connection).create_table_comment(name, comment, schema=SCHEMA)
        else:
            _ops(connection).drop_table_comment(name, schema=SCHEMA)

    return fix


def _rebuild_index(index: Index, drop: bool) -> Fix:
    def fix(connection: Connection) -> None:
        if drop:
            assert index.name is not None and index.table is not None
            _ops(connection).drop_index(str(index.name), table_name=index.table.name, schema=SCHEMA)
        index.create(connection)

    return fix


def _add_constraint(constraint: Constraint, drop_type: str | None = None) -> Fix:
    def fix(connection: Connection) -> None:
        if drop_type is not None:
            table = constraint.table.name
            _ops(connection).drop_constraint(str(constraint.name), table, type_=drop_type, schema=SCHEMA)
        connection.execute(AddConstraint(constraint))

    return fix


def _index_text(index: Index) -> str:
    columns = ", ".join(getattr(e, "name", None) or str(e) for e in index.expressions)
    return f"{'unique ' if index.unique else ''}({columns})"


def _default_text(default: Any) -> str:
    if default is None or default is False:
        return "none"
    arg = getattr(default, "arg", default)
    return str(getattr(arg, "text", arg))


def _column(diff: tuple[Any, ...]) -> Difference:
    kind, _schema, table, name, kw, old, new = diff
    subject = f"pgmem.{table}.{name}"
    if kind == "modify_type":
        return Difference("columns", subject, f"type {old}, declared {new} (not repaired: convert it by hand)")
    if kind == "modify_nullable":
        wanted = "nullable" if new else "NOT NULL"
        return Difference(
            "columns",
            subject,
            f"{'nullable' if old else 'NOT NULL'}, declared {wanted}",
            fix=_alter(table, name, {"existing_type": kw.get("existing_type")}, nullable=new),
        )
    if kind == "modify_default":
        detail = f"default {_default_text(old)}, declared {_default_text(new)}"
        keep = {"existing_type": kw.get("existing_type"), "existing_nullable": kw.get("existing_nullable")}
        return Difference("columns", subject, detail, fix=_alter(table, name, keep, server_default=new))
    keep = {"existing_type": kw.get("existing_type"), "existing_comment": old}
    return Difference("columns", subject, "comment differs", "warning", _alter(table, name, keep, comment=new))


def _alembic(connection: Connection) -> Iterator[Difference]:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    context = MigrationContext.configure(
        connection,
        opts={
            "target_metadata": metadata,
            "include_schemas": True,
            "include_name": _include_name,
            "include_object": _include_object,
            "version_table_schema": SCHEMA,
            "compare_type": True,
            "compare_server_default": True,
        },
    )
    diffs: list[tuple[Any, ...]] = []
    for diff in compare_metadata(context, metadata):
        diffs.extend(diff if isinstance(diff, list) else [diff])
    removed = {(d[0].replace("remove_", "add_"), d[1].name) for d in diffs if d[0] in ("remove_index", "remove_fk")}
    removed |= {("add_constraint", d[1].name) for d in diffs if d[0] == "remove_constraint"}
    added = {(d[0], d[1].name) for d in diffs if d[0] in ("add_index", "add_constraint", "add_fk")}
    missing = [d[1].name for d in diffs if d[0] == "add_table"]
    create = _create_tables(missing)
    for diff in diffs:
        kind = diff[0]
        if kind == "add_table":
            yield Difference("tables", f"pgmem.{diff[1].name}", "missing", fix=create)
        elif kind == "remove_table":
            yield Difference("tables", f"pgmem.{diff[1].name}", _LEFT, "warning")
        elif kind in ("add_table_comment", "remove_table_comment"):
            name = diff[1].name
            yield Difference("tables", f"pgmem.{name}", "comment differs", "warning", _table_comment(name))
        elif kind == "add_column":
            _s, table, column = diff[1:]
            detail = f"missing ({column.type}{'' if column.nullable else ' NOT NULL'}"
            detail += f", default {_default_text(column.server_default)})" if column.server_default else ")"
            yield Difference("columns", f"pgmem.{table}.{column.name}", detail, fix=_add_column(table, column))
        elif kind == "remove_column":
            yield Difference("columns", f"pgmem.{diff[2]}.{diff[3].name}", _LEFT, "warning")
        elif kind.startswith("modify_"):
            yield _column(diff)
        elif kind in ("add_index", "add_constraint", "add_fk") and diff[1].table.name in missing:
            continue  # created with its table
        elif kind == "add_index":
            index: Index = diff[1]
            rebuilt = (kind, index.name) in removed
            on = f"on pgmem.{index.table.name if index.table is not None else '?'}"
            detail = f"differs from its declaration {_index_text(index)}" if rebuilt else "missing"
            yield Difference("indexes", f"pgmem.{index.name}", f"{detail} ({on})", fix=_rebuild_index(index, rebuilt))
        elif kind in ("add_constraint", "add_fk"):
            constraint: Constraint = diff[1]
            rebuilt = (kind, constraint.name) in removed
            drop = ("foreignkey" if kind == "add_fk" else "unique") if rebuilt else None
            subject = f"{constraint.name} on pgmem.{constraint.table.name}"
            detail = "differs from its declaration" if rebuilt else "missing"
            yield Difference("constraints", subject, detail, fix=_add_constraint(constraint, drop))
        elif kind in ("remove_index", "remove_constraint", "remove_fk"):
            if (kind.replace("remove_", "add_"), diff[1].name) in added:
                continue  # the same name declared otherwise: reported (and rebuilt) above
            category = "indexes" if kind == "remove_index" else "constraints"
            table = diff[1].table.name if diff[1].table is not None else "?"
            subject = f"pgmem.{diff[1].name} (on pgmem.{table})"
            if kind == "remove_index" and diff[1].name in RETIRED_INDEXES:
                retire = sql.SQL("DROP INDEX {}").format(sql.Identifier(SCHEMA, diff[1].name))
                yield Difference(
                    category, subject, "left by an earlier revision, dropped by a later one", fix=running(retire)
                )
                continue
            yield Difference(category, subject, _LEFT, "warning")
        else:  # pragma: no cover - a kind a newer alembic compares
            yield Difference("tables", str(diff[1]), f"{kind} (not repaired)")


_TABLES = """
SELECT c.relname::text, c.relpersistence::text, coalesce(c.reloptions, '{}')::text[],
       array(SELECT k.conname::text FROM pg_constraint AS k WHERE k.conrelid = c.oid AND k.contype = 'c')
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')"""


def _catalog(conn: psycopg.Connection[Any]) -> Iterator[Difference]:
    """What alembic does not compare: CHECK constraints by name, UNLOGGED, storage parameters."""
    for name, persistence, options, checks in conn.execute(_TABLES):
        table = metadata.tables.get(f"{SCHEMA}.{name}")
        if table is None:
            continue
        ident = sql.Identifier(SCHEMA, name)
        declared = {str(c.name): c for c in table.constraints if isinstance(c, CheckConstraint) and c.name}
        for check in sorted(set(declared) - set(checks)):
            constraint = declared[check]
            yield Difference("constraints", f"{check} on pgmem.{name}", "missing", fix=_add_constraint(constraint))
        for check in sorted(set(checks) - set(declared)):
            yield Difference("constraints", f"{check} on pgmem.{name}", _LEFT, "warning")
        unlogged = "UNLOGGED" in table._prefixes
        if unlogged != (persistence == "u"):
            detail = "unlogged, declared logged" if persistence == "u" else "logged, declared UNLOGGED"
            change = sql.SQL("ALTER TABLE {} SET UNLOGGED" if unlogged else "ALTER TABLE {} SET LOGGED")
            yield Difference("tables", f"pgmem.{name}", detail, "warning", running(change.format(ident)))
        live = dict(option.split("=", 1) for option in options)
        for key, value in (table.dialect_options["postgresql"]["with"] or {}).items():
            if live.get(key) != str(value):
                detail = f"storage parameter {key}={live.get(key, '(unset)')}, declared {value}"
                setting = sql.SQL("ALTER TABLE {} SET ({} = {})").format(ident, sql.Identifier(key), str(value))
                yield Difference("tables", f"pgmem.{name}", detail, "warning", running(setting))


def differences(connection: Connection) -> list[Difference]:
    """The differences of tables, columns, indexes and constraints, each with its fix where it has one."""
    return [*_alembic(connection), *_catalog(raw(connection))]


def _computing_tsv() -> set[str]:
    """The functions ``messages.tsv`` is computed with: those its expression names, and theirs."""
    import re

    from pgmem.ops.drift_code import blocks

    declared = {f: b.text for b in blocks() for f in b.functions}
    computed = _declared("messages").c.tsv.computed
    todo = set(re.findall(r"pgmem\.(\w+)\(", str(getattr(computed, "sqltext", ""))))
    found: set[str] = set()
    while todo:
        name = todo.pop()
        found.add(name)
        todo |= set(re.findall(r"pgmem\.(\w+)\(", declared.get(name, ""))) - found
    return {f"pgmem.{name}" for name in found}


def recompute_tsv(connection: Connection, before: Snapshot, after: Snapshot) -> int | None:
    """Store ``messages.tsv`` again when a function it is computed with changed (its stored values were
    computed by the old one): the number of messages, or None when none changed."""
    names = _computing_tsv()
    changed = [
        key
        for key, printed in after.items()
        if key[0] == "function" and key[1].split("(")[0] in names and before.get(key) not in (None, printed)
    ]
    if not changed:
        return None
    conn = raw(connection)
    conn.execute("SELECT set_config('pgmem.admin', 'on', true)")  # every namespace (row-level security)
    return conn.execute("UPDATE pgmem.messages SET content = content").rowcount
