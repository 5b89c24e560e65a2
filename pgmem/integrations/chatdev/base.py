"""What every store shares: items and snapshots, the store base class, and running the stores' SQL."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pgmem import Client
from pgmem.checks import check_key, key_for
from pgmem.connecting import get_default_client
from pgmem.errors import ConfigError, Conflict, InvalidInput
from pgmem.models import Message

__all__ = [
    "ConfigError",
    "MemoryContentSnapshot",
    "MemoryItem",
    "MemoryRetrievalResult",
    "MemoryStore",
    "MemoryWritePayload",
    "StoreConfig",
]


#: The ``metadata`` key of a stored item's message that holds the item's fields.
ITEM_KEY = "__store_item__"


def config_error(exc: ValidationError, where: str) -> ConfigError:
    parts = []
    for error in exc.errors():
        loc = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}{'.' + loc if loc else ''}: {error['msg']}")
    return ConfigError("; ".join(parts))


class StoreConfig(BaseModel):
    """Base of the stores' config classes: unknown keys are errors (a typo must not pass silently), and
    values are not coerced (``max_items: "5"`` is an error, as in DevAll)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MemoryContentSnapshot(BaseModel):
    """A serialised message payload: its text and its blocks (attachments included, e.g. base64 data).

    ``blocks`` are JSON objects, each ``{"role": ..., "block": {...}}`` as ChatDev writes them; a block's
    ``attachment`` (``attachment_id``, ``mime_type``, ``name``, ``size``, ``data``…) is kept as given.
    """

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    blocks: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def of(cls, value: Any) -> MemoryContentSnapshot | None:
        """A snapshot from a snapshot, a dict, a string, DevAll's ``MemoryContentSnapshot`` (``text`` and
        ``blocks``) or a message-like object (its ``content``)."""
        if value is None or isinstance(value, MemoryContentSnapshot):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if not isinstance(value, Mapping) and isinstance(getattr(value, "text", None), str):
            value = {"text": value.text, "blocks": list(getattr(value, "blocks", None) or [])}
        if isinstance(value, Mapping):
            try:
                return cls.model_validate(dict(value))
            except ValidationError as exc:
                raise config_error(exc, "snapshot") from None
        content = getattr(value, "content", None)
        if isinstance(content, str):
            return cls(text=content)
        raise InvalidInput(f"cannot make a memory snapshot of a {type(value).__name__}")

    def to_message_blocks(self) -> list[Any]:
        """The blocks as DevAll's ``MessageBlock`` objects when DevAll's ``entity.messages`` is loaded in
        this process (its executor's thinking path calls this on retrieved items), else as the block
        dicts. Blocks that do not parse are left out, as DevAll does."""
        blocks = [p["block"] for p in self.blocks if isinstance(p.get("block"), dict)]
        devall = sys.modules.get("entity.messages")
        factory = getattr(getattr(devall, "MessageBlock", None), "from_dict", None)
        if factory is None:
            return blocks
        out = []
        for block in blocks:
            try:
                out.append(factory(block))
            except Exception:  # noqa: BLE001,S112 - DevAll skips a block it cannot read; so do we
                continue
        return out

    def attachment_overview(self) -> list[dict[str, Any]]:
        """``role``, ``attachment_id``, ``mime_type``, ``name`` and ``size`` of each attachment (no data)."""
        out = []
        for payload in self.blocks:
            block = payload.get("block") if isinstance(payload, dict) else None
            attachment = block.get("attachment") if isinstance(block, dict) else None
            if isinstance(attachment, dict):
                out.append(
                    {"role": payload.get("role")}
                    | {k: attachment.get(k) for k in ("attachment_id", "mime_type", "name", "size")}
                )
        return out


class MemoryItem(BaseModel):
    """One item of a store (ChatDev's ``MemoryItem``); ``score`` is set on retrieved items."""

    id: str
    content_summary: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime | None = None
    input_snapshot: MemoryContentSnapshot | None = None
    output_snapshot: MemoryContentSnapshot | None = None
    score: float | None = None

    def attachments(self) -> list[dict[str, Any]]:
        snapshots = [s for s in (self.input_snapshot, self.output_snapshot) if s is not None]
        return [a for s in snapshots for a in s.attachment_overview()]

    def to_message(self, *, role: str, cause_by: str) -> Message:
        """The message that stores this item (its fields travel in ``metadata``)."""
        doc = {
            "metadata": self.metadata,
            "input_snapshot": None if self.input_snapshot is None else self.input_snapshot.model_dump(),
            "output_snapshot": None if self.output_snapshot is None else self.output_snapshot.model_dump(),
        }
        return Message(
            id=self.id,
            content=self.content_summary,
            role=role,
            cause_by=cause_by,
            metadata={ITEM_KEY: doc},
            created_at=self.timestamp or datetime.now(UTC),
        )

    @classmethod
    def from_message(cls, message: Message, score: float | None = None) -> MemoryItem:
        doc = message.metadata.get(ITEM_KEY) or {}
        return cls(
            id=message.id,
            content_summary=message.content,
            metadata=doc.get("metadata") or {},
            timestamp=message.created_at,
            input_snapshot=MemoryContentSnapshot.of(doc.get("input_snapshot")),
            output_snapshot=MemoryContentSnapshot.of(doc.get("output_snapshot")),
            score=score,
        )


class MemoryWritePayload(BaseModel):
    """What a node hands to the stores after it ran (ChatDev's ``MemoryWritePayload``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    agent_role: str = ""
    inputs_text: str = ""
    input_snapshot: MemoryContentSnapshot | None = None
    output_snapshot: MemoryContentSnapshot | None = None

    @field_validator("input_snapshot", "output_snapshot", mode="before")
    @classmethod
    def _snapshot(cls, value: Any) -> Any:
        return value if isinstance(value, Mapping) else MemoryContentSnapshot.of(value)


class MemoryRetrievalResult(BaseModel):
    """Retrieved items and the context block made of them."""

    formatted_text: str
    items: list[MemoryItem]

    def has_multimodal(self) -> bool:
        return any(
            (i.input_snapshot and i.input_snapshot.blocks) or (i.output_snapshot and i.output_snapshot.blocks)
            for i in self.items
        )

    def attachment_overview(self) -> list[dict[str, Any]]:
        return [a for item in self.items for a in item.attachments()]


def check_store_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a memory store name must be a non-blank string, got {name!r}")
    key_for("store:", name)  # NUL bytes and the like
    return name


def check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
        raise InvalidInput(f"top_k must be an integer in [1, 1000], got {top_k!r}")
    return top_k


def check_threshold(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1.0 <= value <= 1.0:
        raise InvalidInput(f"similarity_threshold must be a number in [-1, 1], got {value!r}")
    return float(value)


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


class MemoryStore:
    """Base of the stores. A store lives in Postgres (the memory ``store:<name>``), so every process that
    configures the same name in the same namespace shares it; writes are durable when they return.

    Subclasses set ``type_name``, ``readable``/``writable`` and implement :meth:`retrieve` (and
    :meth:`update` when writable).
    """

    type_name: ClassVar[str] = ""
    writable: ClassVar[bool] = True

    def __init__(self, name: str, config: StoreConfig, *, client: Client | None = None) -> None:
        self.name = check_store_name(name)
        self.config = config
        self._client = client
        self.memory_key = check_key(key_for("store:", name))

    @property
    def client(self) -> Client:
        return self._client if self._client is not None else get_default_client()

    @property
    def cause_by(self) -> str:
        return f"pgmem.integrations.chatdev.{self.type_name}"

    def load(self) -> None:
        """Record the store in ``pgmem.memory_stores`` (a name keeps its first type: loading it as another
        type raises :class:`pgmem.Conflict`). Idempotent; called by :func:`pgmem.integrations.chatdev.build_stores`."""
        recorded = self.client.stores.register(self.name, self.type_name, self.config.model_dump(mode="json"))
        if recorded != self.type_name:
            raise Conflict(
                f"memory store {self.name!r} is a {recorded!r} store in namespace {self.client.namespace!r}, "
                f"not {self.type_name!r}"
            )

    def save(self) -> None:
        """Nothing to do: every write is committed when it returns (ChatDev's stores write files here)."""

    def count_memories(self) -> int:
        return self.client.messages.count(self.memory_key)

    def items(self) -> list[MemoryItem]:
        """Every item, oldest first."""
        return [MemoryItem.from_message(m) for m in self.client.messages.last(self.memory_key)]

    def clear(self) -> int:
        """Remove every item; return how many there were."""
        return self.client.messages.clear(self.memory_key)

    def retrieve(
        self,
        agent_role: str,
        query: MemoryContentSnapshot | str,
        top_k: int = 3,
        similarity_threshold: float = -1.0,
    ) -> list[MemoryItem]:
        raise NotImplementedError

    def update(self, payload: MemoryWritePayload) -> bool:
        """Write what a node produced; return whether an item was stored."""
        raise InvalidInput(f"memory store {self.name!r} ({self.type_name}) is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


_PAYLOAD_FIELDS = ("agent_role", "inputs_text", "input_snapshot", "output_snapshot")


def payload_of(value: MemoryWritePayload | Mapping[str, Any] | Any) -> MemoryWritePayload:
    """A payload from pgmem's, a dict, or DevAll's ``MemoryWritePayload`` (any object with its four
    attributes; a ``None`` role or input text reads as empty)."""
    if isinstance(value, MemoryWritePayload):
        return value
    if not isinstance(value, Mapping) and all(hasattr(value, f) for f in _PAYLOAD_FIELDS):
        value = {f: getattr(value, f) for f in _PAYLOAD_FIELDS}
        value = {k: v for k, v in value.items() if v is not None or k.endswith("snapshot")}
    if isinstance(value, Mapping):
        try:
            return MemoryWritePayload.model_validate(dict(value))
        except ValidationError as exc:
            raise config_error(exc, "payload") from None
    raise InvalidInput(f"expected a MemoryWritePayload, got {type(value).__name__}")


def query_text(query: MemoryContentSnapshot | str | Sequence[Any]) -> str:
    snapshot = MemoryContentSnapshot.of(query)
    text = "" if snapshot is None else snapshot.text
    if "\x00" in text:
        raise InvalidInput("the query contains a NUL byte")
    return text
