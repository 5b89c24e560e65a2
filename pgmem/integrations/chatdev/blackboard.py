"""The ``blackboard`` store: an append-only log trimmed by count and age, read by recency, no vectors."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import Connection
from pydantic import Field

from pgmem.integrations.chatdev.base import (
    MemoryContentSnapshot,
    MemoryItem,
    MemoryStore,
    MemoryWritePayload,
    StoreConfig,
    check_threshold,
    check_top_k,
    payload_of,
    query_text,
)

__all__ = ["BlackboardMemoryConfig", "BlackboardMemoryStore"]


class BlackboardMemoryConfig(StoreConfig):
    """Config of the ``blackboard`` store.

    Attributes:
        max_items: the newest this many entries are kept.
        max_age_seconds: entries older than this are dropped (None: no age limit).
        max_content_length: an entry longer than this many characters is cut (None, the default: kept
            whole, as DevAll does).
        memory_path: accepted for ChatDev configs and ignored (the log is in Postgres).
    """

    max_items: int = Field(default=1000, ge=1, le=10_000_000)
    max_age_seconds: float | None = Field(default=None, gt=0, le=10 * 365 * 24 * 3600)
    max_content_length: int | None = Field(default=None, ge=20, le=1_000_000)
    memory_path: str | None = None


class BlackboardMemoryStore(MemoryStore):
    """A shared board every writer appends to; a reader gets its newest entries, oldest first (DevAll's
    order).

    Example:
        >>> board = BlackboardMemoryStore("board", BlackboardMemoryConfig(max_items=100), client=client)
        >>> board.update(MemoryWritePayload(agent_role="qa", output_snapshot=MemoryContentSnapshot(text="tests pass")))
        >>> [i.content_summary for i in board.retrieve("dev", "", top_k=5)]
    """

    type_name = "blackboard"
    config: BlackboardMemoryConfig

    def update(self, payload: MemoryWritePayload) -> bool:
        """Append the text of the node's output snapshot (else its input snapshot, else its input text),
        stripped, as DevAll does, and trim the log, in one transaction; False when it was blank."""
        payload = payload_of(payload)
        snapshot = payload.output_snapshot or payload.input_snapshot
        text = (snapshot.text if snapshot is not None else payload.inputs_text).strip()
        if not text:
            return False
        limit = self.config.max_content_length
        item = MemoryItem(
            id=f"bb_{uuid.uuid4().hex}",
            content_summary=text if limit is None or len(text) <= limit else text[: limit - 3] + "...",
            metadata={
                "agent_role": payload.agent_role,
                "input_preview": payload.inputs_text[:200],
                "attachments": [] if snapshot is None else snapshot.attachment_overview(),
            },
            input_snapshot=payload.input_snapshot,
            output_snapshot=payload.output_snapshot,
        )
        message = item.to_message(role=payload.agent_role or "assistant", cause_by=self.cause_by)
        client = self.client
        with client.transaction() as conn:
            client.messages.add(self.memory_key, message, connection=conn)
            self._trim(conn)
        return True

    def trim(self) -> int:
        """Apply the count and age limits now (writes do it too); return how many entries were removed."""
        return self._trim(None)

    def _trim(self, connection: Connection[Any] | None) -> int:
        limits = self.config
        return self.client.retention.trim(
            self.memory_key, limits.max_items, older_than=limits.max_age_seconds, connection=connection
        )

    def retrieve(
        self,
        agent_role: str,
        query: MemoryContentSnapshot | str,
        top_k: int = 3,
        similarity_threshold: float = -1.0,
    ) -> list[MemoryItem]:
        """The newest ``top_k`` entries within the age limit, oldest first, as DevAll returns them (the
        query is not used)."""
        top_k = check_top_k(top_k)
        check_threshold(similarity_threshold)
        query_text(query)  # not used, but a bad one is still an error

        found = self.client.messages.newest(self.memory_key, top_k, within=self.config.max_age_seconds)
        return [MemoryItem.from_message(message) for message in reversed(found)]
