"""The line types of an export file (:mod:`pgmem.ops.portability`, whose doc describes the file): which
tables' rows it holds, with which columns, in the order an export writes them and an import needs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql
from sqlalchemy import Column, Table

from pgmem.ops import schema

__all__ = ["FORMAT", "NOT_EXPORTED", "plan"]

#: The file format's version; an import refuses a newer one. Raised only when an importer of the older
#: version would misread a newer file (take a line to mean what it does not); a line type or a field it does
#: not know, or a field left out, it refuses by name (nothing imported), and an importer reads every older
#: version (a field an older export wrote that is now derived is accepted and ignored: :attr:`_Kind.ignored`).
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

#: Columns derived from other rows, left out: a memory's vector revision (the vector log's head), an item
#: version's item id (an identity of the items table, which the target draws afresh: the import gives each
#: version the id of its item's lifetime there, pgmem.ops.importing ``_item_ids``). Files written before
#: item_id was left out carry it: accepted and ignored.
_DERIVED = {"memories": frozenset({"vec_rev"}), "item_history": frozenset({"item_id"})}

#: Line types written after another one's (what they refer to), where the schema's table order differs:
#: an item's versions after the items.
_AFTER = {"item_history": "items"}


@dataclass(frozen=True)
class _Kind:
    """One line type: its table, the columns under ``"row"``, and those moved to ``"seqs"``."""

    type: str
    table: Table
    columns: tuple[Column[Any], ...]
    seqs: tuple[str, ...] = ()
    namespace_only: bool = False  # a whole-namespace export only (not with --memory)
    ignored: frozenset[str] = frozenset()  # fields of older files, now derived: accepted, not imported

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
    for table in [t for t in rest if t.name in _AFTER]:
        rest.remove(table)
        rest.insert(next(i for i, t in enumerate(rest) if t.name == _AFTER[table.name]) + 1, table)
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
                ignored=_DERIVED.get(table.name, frozenset()),
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


def _table(kind: _Kind) -> sql.Composable:
    return sql.Identifier(schema.SCHEMA, kind.table.name)
