"""Each row type of pgmem.planning.rows names the columns of the statements that return it, in order.

The statements are described by the server (prepared, never run): their result columns are compared
with the row type's fields. A new statement of several columns must say which row type it returns here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import ExecStatus

from pgmem._sync.retention import RetentionPolicy
from pgmem.planning import statements
from pgmem.planning.merge_rows import BatchMergeRow, PendingMergeRow, UndecidedRow
from pgmem.planning.rows import (
    QUEUE_ITEM_ROW,
    ActionFlowRow,
    AddedManyRow,
    AddedManyVectorRow,
    AddedRow,
    AddedVectorRow,
    AnalyzeLockRow,
    BrainLockRow,
    BrainRow,
    DepthRow,
    EmbeddingModelRow,
    IndexedModelRow,
    ItemRow,
    LineageHeadRow,
    LockedFileRow,
    MemoryModelRow,
    MemoryVectorRow,
    MessageRow,
    MessageStatsRow,
    NackRow,
    OutboxItemRow,
    PendingModelRow,
    PendingRow,
    PromotedRow,
    PublishRow,
    PushManyRow,
    PushRow,
    RoleActionRow,
    StoreFileRow,
    StoreRow,
    SummaryRow,
    VectorChangeRow,
)
from pgmem.planning.search import MESSAGE_COLUMNS

MESSAGE = MessageRow._fields
SUMMARY = SummaryRow._fields
POLICY = tuple(field.name for field in dataclasses.fields(RetentionPolicy))

#: (file, statement) -> the columns it returns: the fields of its row type.
ROWS: dict[tuple[str, str], tuple[str, ...]] = {
    ("messages", "add_one"): AddedRow._fields,
    ("messages", "add_many"): AddedManyRow._fields,
    ("messages", "add_one_vector"): AddedVectorRow._fields,
    ("messages", "add_many_vector"): AddedManyVectorRow._fields,
    ("messages", "append"): AddedManyRow._fields,
    # near-duplicate batches: the new entries' message ids (not a count) and whether the memory embeds
    ("messages", "add_many_merging"): AddedManyRow._fields,
    ("messages", "add_many_merging_vector"): AddedManyVectorRow._fields,
    ("merging", "undecided_memory"): UndecidedRow._fields,
    ("merging", "merge_near_batch"): BatchMergeRow._fields,
    ("merging", "undecided_namespace"): UndecidedRow._fields,
    ("merging", "undecided_of"): UndecidedRow._fields,
    **{
        ("messages", name): MESSAGE
        for name in (
            "last_k",
            "by_action",
            "by_actions",
            "by_role",
            "by_sender",
            "by_recipient",
            "by_content",
            "search_text",
            "at_position",
            "at_position_from_end",
            "get_messages",
            "get_message",
            "delete_newest",
            "newest",
            "delete_at_position",
            "delete_at_position_from_end",
            "delete_oldest",
            "move_oldest",
        )
    },
    ("messages", "stats"): MessageStatsRow._fields,
    **{("queues", name): QUEUE_ITEM_ROW for name in ("claim", "ack_claim", "take", "peek", "dead_letters")},
    ("queues", "push"): PushRow._fields,
    ("queues", "push_once"): PushRow._fields,
    ("queues", "push_many"): PushManyRow._fields,
    ("queues", "nack_retry"): NackRow._fields,
    ("queues", "nack_dead"): NackRow._fields,
    ("queues", "depth"): DepthRow._fields,
    ("queues", "publish"): PublishRow._fields,
    ("queues", "publish_vector"): PublishRow._fields,
    ("summaries", "unsummarized"): MESSAGE,
    **{
        ("summaries", name): SUMMARY for name in ("unrolled", "insert", "list", "frontier", "range_children", "refresh")
    },
    ("summaries", "stale"): (*SUMMARY, "stale_at"),
    ("summaries", "range_messages"): MESSAGE,
    ("retention", "forget_entries"): ("memory", "count"),
    ("retention", "forget_lock_holders"): ("memory", "locked"),
    **{("retention", name): POLICY for name in ("set_policy", "policies")},
    ("brains", "load"): BrainRow._fields,
    ("brains", "lock"): BrainLockRow._fields,
    ("brains", "history"): MESSAGE,
    ("stores", "files"): StoreFileRow._fields,
    ("items", "get"): (*ItemRow._fields, "id", "ttl"),  # then what a refreshing read passes to items.refresh
    ("items", "get_as_of"): ItemRow._fields,
    ("stores", "lock_file"): LockedFileRow._fields,
    ("stores", "stores"): StoreRow._fields,
    ("vectors", "get_model"): EmbeddingModelRow._fields,
    ("vectors", "get_model_by_id"): EmbeddingModelRow._fields,
    ("vectors", "unindexed_switches"): EmbeddingModelRow._fields,
    ("vectors", "indexed_models"): IndexedModelRow._fields,
    ("vectors", "memory_models"): MemoryModelRow._fields,
    ("vectors", "claim_outbox"): OutboxItemRow._fields,
    ("vectors", "store_vectors"): PendingMergeRow._fields,
    ("vectors", "store_halfvecs"): PendingMergeRow._fields,
    ("vectors", "pending"): PendingRow._fields,
    ("vectors", "pending_models"): PendingModelRow._fields,
    ("vectors", "memory_vectors"): MemoryVectorRow._fields,
    ("vectors", "vector_changes"): VectorChangeRow._fields,
    ("vectors", "lineage_heads"): LineageHeadRow._fields,
    ("vectors", "analyze_lock"): AnalyzeLockRow._fields,
    ("vectors", "promote"): PromotedRow._fields,
    ("demo", "messages_by_role_and_action"): RoleActionRow._fields,
    ("demo", "action_flow"): ActionFlowRow._fields,
}
#: Statements of several columns that Python does not read by position: printed for people to read
#: (`pgmem stats`/report read analytics rows by column name), or offered to copy into psql.
NOT_DECODED = {("demo", "conversation"), ("demo", "queues"), ("demo", "dead_letters"), ("demo", "recalls")}
GROUPS = ("messages", "queues", "summaries", "brains", "stores", "items", "vectors", "retention", "demo")


def _columns(conn: psycopg.Connection[Any], text: str) -> tuple[str, ...]:
    """The result columns of a statement, as the server describes it (prepared, not run)."""
    if "{limit}" in text:
        text = sql.SQL(text).format(limit=sql.Literal(1)).as_string(conn)
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    query = re.sub(r"%\((\w+)\)[sb]", placeholder, text).replace("%%", "%")
    prepared = conn.pgconn.prepare(b"", query.encode())
    assert prepared.status == ExecStatus.COMMAND_OK, prepared.error_message
    described = conn.pgconn.describe_prepared(b"")
    fname = described.fname
    return tuple((fname(i) or b"").decode() for i in range(described.nfields))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize(("group", "name"), sorted(ROWS))
def test_the_row_type_names_the_statement_columns(conn: psycopg.Connection[Any], group: str, name: str) -> None:
    assert _columns(conn, statements.load(group)[name]) == ROWS[group, name]


def test_every_statement_of_several_columns_has_a_row_type(conn: psycopg.Connection[Any]) -> None:
    missing = [
        f"{group}.{name}"
        for group in GROUPS
        for name, text in statements.load(group).items()
        if (group, name) not in ROWS and (group, name) not in NOT_DECODED and len(_columns(conn, text)) > 1
    ]
    assert not missing, f"say which row type of pgmem.planning.rows these return: {missing}"


def test_search_rows_start_with_the_message_row(conn: psycopg.Connection[Any]) -> None:
    text = f"SELECT {MESSAGE_COLUMNS} FROM pgmem.messages AS m WHERE m.namespace = %(ns)s"
    assert _columns(conn, text) == MESSAGE
