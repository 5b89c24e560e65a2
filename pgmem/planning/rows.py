"""The rows pgmem reads and writes: one type per result shape, and the message's codec (I/O-free).

Every statement of ``sql/*.sql`` that returns more than one column returns one of the row types below
(a ``NamedTuple``); its comment names the type, and ``tests/integration/test_rows.py`` checks each
type's fields against the statement's result columns. Repositories read rows by field name: build the
type from the driver's tuple with ``RowType._make(row)`` (a C-level tuple copy, ~0.2 us) rather than a
psycopg row factory (``namedtuple_row`` and ``dict_row`` read ``cursor.description``: 25 us for 23
columns). A hot path that must not copy at all (a message, a queue item) reads the tuple by indexes taken
from the row type's ``_fields`` once, at import.

Validation of what is written runs first, in :mod:`pgmem.checks`, so a bad message in a batch rejects
the whole batch with nothing written.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from pgmem.checks import check_message, dump_json, load_json, messages_pass
from pgmem.errors import InvalidInput
from pgmem.models import IGNORED_MESSAGE_ID, Message, aware, is_pydantic_model, public_id, resolve_class, storage_id

if TYPE_CHECKING:
    from pydantic import BaseModel

_sha256 = hashlib.sha256


def _encode_instruct(value: BaseModel | dict[str, Any] | None, where: str) -> str | None:
    if value is None:
        return None
    if is_pydantic_model(value):
        cls = type(value)
        doc = {"kind": "model", "class": f"{cls.__module__}.{cls.__qualname__}", "value": value.model_dump(mode="json")}
    elif isinstance(value, dict):
        doc = {"kind": "dict", "value": value}
    else:
        raise InvalidInput(f"{where}instruct_content must be a pydantic model or a dict, not {type(value).__name__}")
    return dump_json(doc, "instruct_content", where)


def decode_instruct(doc: dict[str, Any] | None) -> BaseModel | dict[str, Any] | None:
    if doc is None:
        return None
    if doc.get("kind") != "model":
        value: dict[str, Any] = doc.get("value", {})
        return value
    from pydantic import BaseModel, create_model  # a stored pydantic model: pydantic is wanted now

    value = doc["value"]
    cls = resolve_class(doc["class"])
    if cls is not None and issubclass(cls, BaseModel):
        try:
            return cls.model_validate(value)
        except ValueError:
            pass  # the class changed since the row was written; fall back to a plain model
    name = doc["class"].rpartition(".")[2] or "InstructContent"
    fields: dict[str, Any] = {k: (Any, None) for k in value}
    model: type[BaseModel] = create_model(name, **fields)
    return model(**value)


def encode(message: Message, index: int | None = None) -> tuple[Any, ...]:
    """Validate ``message`` and return its row for ``messages`` (column order of ``INSERT_COLUMNS``)."""
    return _encoded(message, check_message(message, index))


def _encoded(message: Message, where: str) -> tuple[Any, ...]:
    """The row of a message :func:`check_message` passed (``where``: its place, for JSON errors)."""
    metadata = message.metadata
    return (
        storage_id(message),
        message.content,
        _sha256(message.content.encode("utf-8")).digest(),
        _encode_instruct(message.instruct_content, where),
        message.role,
        message.cause_by,
        message.sent_from,
        sorted(message.send_to),
        "{}" if not metadata and type(metadata) is dict else dump_json(metadata, "metadata", where),
        None if message.tool_calls is None else dump_json(message.tool_calls, "tool_calls", where),
        message.name,
        message.tool_call_id,
        message._source_class,
        aware(message.created_at),  # assigned after construction: still UTC when naive
    )


#: The stored fields of a message, in the order of :func:`encode` and of the fragment ``message_fields``
#: (sql/fragments.sql): the parameter names of its INSERT (``insert_message``, ``message_arrays``).
INSERT_COLUMNS = (
    "id",
    "content",
    "content_hash",
    "instruct_content",
    "role",
    "cause_by",
    "sent_from",
    "send_to",
    "metadata",
    "tool_calls",
    "name",
    "tool_call_id",
    "message_class",
    "created_at",
)


def batch_columns(messages: list[Message]) -> dict[str, list[Any]]:
    """Validate a batch and turn it into one list per column (``INSERT_COLUMNS``), for ``unnest``.

    ``send_to`` travels as one JSON array per message: Postgres arrays of arrays must be rectangular."""
    if not messages_pass(messages):
        rows = _rows_of(messages)  # raises, naming the first bad message
        columns = dict(zip(INSERT_COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
        columns["send_to"] = ["[" + ",".join(map(_json_str, v)) + "]" for v in columns["send_to"]]
        return columns
    # Every message passed: column by column (a list comprehension per field is several times faster
    # than a tuple per message), the JSON fields dumped only for the messages that have some.
    n = len(messages)
    instruct: list[str | None] = [None] * n
    metadata = ["{}"] * n
    tool_calls: list[str | None] = [None] * n
    for index, m in enumerate(messages):
        md = m.metadata
        if m.instruct_content is not None or md or type(md) is not dict or m.tool_calls is not None:
            row = _encoded(m, f"message {index}: ")
            instruct[index], metadata[index], tool_calls[index] = row[3], row[8], row[9]
    contents = [m.content for m in messages]
    return {
        "id": [m.id if m.id != IGNORED_MESSAGE_ID else storage_id(m) for m in messages],
        "content": contents,
        "content_hash": [_sha256(c.encode("utf-8")).digest() for c in contents],
        "instruct_content": instruct,
        "role": [m.role for m in messages],
        "cause_by": [m.cause_by for m in messages],
        "sent_from": [m.sent_from for m in messages],
        "send_to": ["[" + ",".join(map(_json_str, sorted(m.send_to))) + "]" for m in messages],
        "metadata": metadata,
        "tool_calls": tool_calls,
        "name": [m.name for m in messages],
        "tool_call_id": [m.tool_call_id for m in messages],
        "message_class": [m._source_class for m in messages],
        "created_at": [aware(m.created_at) for m in messages],
    }


def _rows_of(messages: list[Message]) -> list[tuple[Any, ...]]:
    """Validate a batch and return its rows (:func:`encode`'s), at memory speed when every message passes
    (checked field by field for the whole batch at once: :func:`pgmem.checks.messages_pass`); else
    message by message, so the error names the first bad message as it always has."""
    if not messages_pass(messages):
        # A bad message somewhere: the first one raises, its checks and then its JSON fields (only a
        # message that has some can fail to encode) in the order encode() meets them.
        for index, message in enumerate(messages):
            where = check_message(message, index)
            if message.metadata or message.instruct_content is not None or message.tool_calls is not None:
                _encoded(message, where)
    return [_encoded(message, f"message {index}: ") for index, message in enumerate(messages)]


_json_str = json.encoder.encode_basestring  # a JSON string literal, non-ASCII kept as is (C)
# One message as a JSON object keyed by INSERT_COLUMNS: the JSON values are written by json_rows.
_JSON_ROW = "{" + ",".join(f'"{name}":%s' for name in INSERT_COLUMNS) + "}"


def json_rows(messages: list[Message]) -> str:
    """Validate a batch and write it as one JSON array of objects keyed by ``INSERT_COLUMNS``, for
    ``json_to_recordset`` (messages.sql ``append``): one text parameter.

    The jsonb fields are embedded as :func:`encode` dumped them (their exact-round-trip rewrites kept),
    ``content_hash`` as bytea's hex input (``\\x…``), ``created_at`` in ISO 8601."""
    out = []
    for (id_, content, digest, instruct, role, cause_by, sent_from, send_to, metadata, tool_calls, name,
         tool_call_id, message_class, created_at) in _rows_of(messages):  # fmt: skip
        out.append(
            _JSON_ROW
            % (
                _json_str(id_),
                _json_str(content),
                f'"\\\\x{digest.hex()}"',
                "null" if instruct is None else instruct,
                _json_str(role),
                _json_str(cause_by),
                _json_str(sent_from),
                "[" + ",".join(map(_json_str, send_to)) + "]",
                metadata,
                "null" if tool_calls is None else tool_calls,
                "null" if name is None else _json_str(name),
                "null" if tool_call_id is None else _json_str(tool_call_id),
                "null" if message_class is None else _json_str(message_class),
                _json_str(created_at.isoformat()),
            )
        )
    return "[" + ",".join(out) + "]"


class MessageRow(NamedTuple):
    """A message as statements return it: ``<seq>, {{message_columns}}`` (sql/fragments.sql).

    ``seq`` is the entry's sequence number in a memory, the message's own, or None (the statement says
    which); the jsonb columns arrive as JSON text, parsed by :func:`decode`.
    """

    seq: int | None
    id: str
    content: str
    instruct_content: str | None
    role: str
    cause_by: str
    sent_from: str
    send_to: list[str]
    metadata: str
    tool_calls: str | None
    name: str | None
    tool_call_id: str | None
    message_class: str | None
    created_at: datetime


_new_message = object.__new__
_loads = load_json  # json.loads, undoing dump_json's tags when the text holds one


def decode(row: tuple[Any, ...]) -> Message:
    """Build a :class:`Message` from a :class:`MessageRow` (or the plain tuple of one, as psycopg returns
    it: decoding unpacks it in ``MessageRow``'s order, with no copy). The values come from columns pgmem
    checked on the way in, so the constructor's checks are skipped."""
    (seq, id_, content, instruct, role, cause_by, sent_from, send_to, metadata, tool_calls, name,
     tool_call_id, message_class, created_at) = row  # fmt: skip
    message: Message = _new_message(Message)
    message.id = public_id(id_)
    message.content = content
    message.instruct_content = None if instruct is None else decode_instruct(_loads(instruct))
    message.role = role
    message.cause_by = cause_by
    message.sent_from = sent_from
    message.send_to = set(send_to)
    message.metadata = {} if metadata == "{}" else _loads(metadata)  # '{}': most messages, not parsed
    message.tool_calls = None if tool_calls is None else _loads(tool_calls)
    message.name = name
    message.tool_call_id = tool_call_id
    message.created_at = created_at
    message._source_class = message_class
    message._seq = seq
    return message


# -- messages.sql ---------------------------------------------------------------------------------------


class AddedRow(NamedTuple):
    """``add_one``: the new entry's sequence number, and the ids of the memory's embedding models (the
    message was queued for them; empty: none). ``add_one_vector``: seq None when the memory held the message
    already; embeds: its models other than the given vector's."""

    seq: int | None
    embeds: list[int]


class AddedManyRow(NamedTuple):
    """``add_many``: how many entries were added, and the memory's embedding models (as :class:`AddedRow`)."""

    added: int
    embeds: list[int]


class AddedVectorRow(NamedTuple):
    """``add_one_vector``: an :class:`AddedRow`, and whether an entry of the message (in any memory) waits
    for a near-duplicate merge the vector just stored may decide."""

    seq: int | None
    embeds: list[int]
    undecided: bool


class AddedManyVectorRow(NamedTuple):
    """``add_many_vector``: an :class:`AddedManyRow`, and undecided as :class:`AddedVectorRow`'s (of any
    message of the batch). ``add_many_merging_vector``: the same columns, ``added`` the new entries' ids."""

    added: Any
    embeds: list[int]
    undecided: bool


class MessageStatsRow(NamedTuple):
    """``stats``: messages of a memory by role and action."""

    namespace: str
    memory: str
    role: str
    cause_by: str
    messages: int


# -- queues.sql -----------------------------------------------------------------------------------------


class QueueItemRow(NamedTuple):
    """The item's part of a queue item row (the fragment ``queue_item_columns`` of sql/queues.sql); the
    item's message follows it in the same row, as a :class:`MessageRow` (``QUEUE_ITEM_ROW``)."""

    id: int
    queue: str
    priority: int
    attempts: int
    max_attempts: int
    enqueued_at: datetime
    available_at: datetime
    lease_until: datetime | None
    dedup_key: str | None


#: The columns of a queue item row (``claim``, ``ack_claim``, ``take``, ``peek``, ``dead_letters``).
QUEUE_ITEM_ROW = QueueItemRow._fields + MessageRow._fields


class PushRow(NamedTuple):
    """``push``: the new item's id (None: a ready item had the dedup key) and whether it rang the doorbell
    (pgmem.doorbell: waiting consumers are woken once it commits)."""

    id: int | None
    rung: int


class PushManyRow(NamedTuple):
    """``push_many``: the ids of the new items, and whether the batch rang the doorbell."""

    ids: list[int]
    rung: int


class NackRow(NamedTuple):
    """``nack``: the item's new status and when it is claimable again."""

    status: str
    available_at: datetime


class DepthRow(NamedTuple):
    """``depth``: items not yet acknowledged (leased included), those claimable now, dead letters."""

    ready: int
    claimable: int
    dead: int


class PublishRow(NamedTuple):
    """``publish``: the message's entry in the memory (None: it held it already), its inboxes, the
    doorbell rings (one per inbox: their consumers are woken once it commits), the ids of the memory's
    embedding models (``publish_vector``: models other than the given vector's) to embed it with, and
    whether an entry of the message waits for the given vector's near-duplicate merge."""

    seq: int | None
    inboxes: list[str] | None
    rung: int
    embeds: list[int]
    undecided: bool  # publish_vector: an entry of the message waits for this vector's merge


# -- summaries.sql --------------------------------------------------------------------------------------


class SummaryRow(NamedTuple):
    """A summary (the fragment ``summary_columns`` of sql/summaries.sql)."""

    id: int
    level: int
    first_seq: int
    last_seq: int
    content: str
    source_chars: int
    source_tokens: int
    summary_tokens: int
    tokenizer: str
    created_at: datetime


# -- brains.sql -----------------------------------------------------------------------------------------


class BrainRow(NamedTuple):
    """``load``: a brain's scalar state."""

    redis_key: str
    historical_summary: str
    summarized_seq: int
    last_history_id: str
    last_talk: str | None
    version: int
    expires_at: datetime | None


class BrainLockRow(NamedTuple):
    """``lock``: what a writer holding the brain row needs."""

    summarized_seq: int
    version: int
    expired: bool


# -- stores.sql -----------------------------------------------------------------------------------------


class StoreRow(NamedTuple):
    """``stores``: a memory store recorded in ``pgmem.memory_stores``."""

    name: str
    type: str
    config: dict[str, Any]
    created_at: datetime


class StoreFileRow(NamedTuple):
    """``files``: a file a file store indexed."""

    path: str
    sha256: bytes
    chunk_ids: list[str]


class LockedFileRow(NamedTuple):
    """``lock_file``: the indexed state of one file, locked."""

    sha256: bytes
    chunk_ids: list[str]


# -- demo.sql -------------------------------------------------------------------------------------------


class RoleActionRow(NamedTuple):
    """``messages_by_role_and_action``."""

    role: str
    action: str
    messages: int
    characters: int


class ActionFlowRow(NamedTuple):
    """``action_flow``."""

    from_action: str
    to_action: str
    edges: int
    median_delay_s: Decimal


# -- vectors.sql ----------------------------------------------------------------------------------------


class EmbeddingModelRow(NamedTuple):
    """``get_model``, ``get_model_by_id``, ``unindexed_switches``: a registered embedding model."""

    id: int
    name: str
    dimension: int
    kind: str
    distance: str


class IndexedModelRow(NamedTuple):
    """``indexed_models``: a registered model, and whether item vectors use it (``pgmem migrate``)."""

    id: int
    name: str
    dimension: int
    kind: str
    distance: str
    items: bool


class MemoryModelRow(NamedTuple):
    """``memory_models``: a model of a memory and its status there (``active``, ``building``)."""

    status: str
    id: int
    name: str
    dimension: int
    kind: str
    distance: str


class OutboxItemRow(NamedTuple):
    """``claim_outbox``: a queued message to embed, and whether an entry of it waits for its vector to
    decide a near-duplicate merge."""

    message_id: str
    content: str
    merging: bool


class PendingRow(NamedTuple):
    """``pending``: messages queued for one model."""

    model: str
    queued: int


class PendingModelRow(NamedTuple):
    """``pending_models``: a model with queued messages, and whether a switch is under way."""

    id: int
    name: str
    dimension: int
    kind: str
    distance: str
    switching: bool


class PromotedRow(NamedTuple):
    """``promote``: a memory whose model switch finished (its caches told through the doorbell)."""

    memory: str


class MemoryVectorRow(NamedTuple):
    """``memory_vectors``: the memory's revision, and one of its vectors (NULL id: the memory is empty);
    for a fork, the memories it inherits from and their revisions (NULL: no fork)."""

    rev: int
    message_id: str | None
    vector: bytes | None
    ancestors: list[str] | None
    ancestor_revs: list[int] | None


class LineageHeadRow(NamedTuple):
    """``lineage_heads``: a memory of a lineage (the memory itself, or one a fork inherits from) and its
    revision."""

    memory: str
    vec_rev: int


class VectorChangeRow(NamedTuple):
    """``vector_changes``: one change after a revision (NULL rev: none), with the memory's head, the
    oldest logged revision and the active model."""

    rev: int | None
    op: int | None
    message_id: str | None
    vector: bytes | None
    head: int | None
    floor: int | None
    active: int | None


class AnalyzeLockRow(NamedTuple):
    """``analyze_lock``: whether this process analyzes (the lock), and the lock timeout it set."""

    locked: bool
    lock_timeout: str


class ItemRow(NamedTuple):
    """``items.get``, ``items.get_refresh``: an item of the item store."""

    path: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class ItemHitRow(NamedTuple):
    """A search of the item store (pgmem.planning.items): the item, its score (None without a query) and,
    for an index scan, how many vectors the scan returned."""

    path: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float | None
    scanned: int | None
