"""``MemoryManager``: what a node reads from its stores before it runs and writes to them after."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pgmem.errors import ConfigError
from pgmem.integrations.chatdev.base import (
    MemoryContentSnapshot,
    MemoryItem,
    MemoryRetrievalResult,
    MemoryStore,
    MemoryWritePayload,
    payload_of,
)
from pgmem.integrations.chatdev.config import MemoryAttachmentConfig, stage_name

__all__ = ["MemoryManager", "devall_rank"]

log = logging.getLogger("pgmem.integrations.chatdev")

HEADER = "===== Related Memories ====="
FOOTER = "===== End of Memory ====="


def devall_rank(item: MemoryItem, query: str, now: float) -> float:
    """DevAll's ``MemoryManager._score_memory``: ``0.7 * recency * length + 0.3 * relevance``, where
    recency falls linearly from 1 to 0.1 over 30 days, length is 0.5 under 20 characters, 0.8 over 200,
    else 1, and relevance is the share of the query's whitespace-split lowercase words in the item."""
    stamp = item.timestamp.timestamp() if item.timestamp is not None else now
    recency = max(0.1, 1.0 - (now - stamp) / 3600 / (24 * 30))
    size = len(item.content_summary)
    length = 0.5 if size < 20 else 0.8 if size > 200 else 1.0
    words = set(query.lower().split())
    relevance = len(words & set(item.content_summary.lower().split())) / len(words) if words else 0.0
    return 0.7 * recency * length + 0.3 * relevance


class MemoryManager:
    """A node's memory attachments over shared stores.

    Args:
        attachments: :class:`MemoryAttachmentConfig` objects, DevAll's ``MemoryAttachmentConfig``
            objects, or dicts (``name``, ``retrieve_stage``, ``top_k``, ``similarity_threshold``,
            ``read``, ``write``).
        stores: the stores by name (e.g. from :func:`pgmem.integrations.chatdev.build_stores`).

    Raises:
        ConfigError: an attachment names a store that does not exist, or a store twice.

    Example:
        >>> manager = MemoryManager([{"name": "convo", "retrieve_stage": ["gen"]}, {"name": "docs", "write": False}],
        ...                         stores)
        >>> context = manager.retrieve("coder", "how is the board drawn?", current_stage="gen")
        >>> print(context.formatted_text)  # one block, a section per store
        >>> manager.update(MemoryWritePayload(agent_role="coder", inputs_text="...", output_snapshot=...))
    """

    def __init__(
        self, attachments: Sequence[MemoryAttachmentConfig | Mapping[str, Any] | Any], stores: Mapping[str, MemoryStore]
    ):
        if isinstance(attachments, str | bytes | Mapping) or not isinstance(attachments, Sequence):
            raise ConfigError(f"memories: expected a list of attachments, got {type(attachments).__name__}")
        self.attachments = [MemoryAttachmentConfig.parse(a, f"memories[{i}]") for i, a in enumerate(attachments)]
        self.stores: dict[str, MemoryStore] = {}
        for index, attachment in enumerate(self.attachments):
            if attachment.name in self.stores:
                raise ConfigError(f"memories[{index}].name: store {attachment.name!r} is attached twice")
            store = stores.get(attachment.name)
            if store is None:
                raise ConfigError(
                    f"memories[{index}].name: no memory store named {attachment.name!r} "
                    f"(configured: {', '.join(sorted(stores)) or 'none'})"
                )
            self.stores[attachment.name] = store

    def retrieve(
        self,
        agent_role: str,
        query: MemoryContentSnapshot | str | Any,
        current_stage: Any = None,
        *,
        stage: Any = None,
    ) -> MemoryRetrievalResult | None:
        """Read every readable attachment whose ``retrieve_stage`` includes the stage, as DevAll's
        manager does: the items of all stores ranked together by DevAll's score (recency over 30 days,
        a length factor and the share of the query's words found), formatted as one block with a section
        per store in the order of its best item. None when nothing was found.

        Args:
            agent_role: the reading node's role.
            query: a snapshot (pgmem's or DevAll's), a dict or a string.
            current_stage: the stage (a name or DevAll's ``AgentExecFlowStage``); None: every attachment.
            stage: the same, by pgmem's earlier name.
        """
        current = stage_name(current_stage if current_stage is not None else stage)
        snapshot = MemoryContentSnapshot.of(query)
        text = "" if snapshot is None else snapshot.text
        ranked: list[tuple[str, MemoryItem, float]] = []
        now = time.time()
        for attachment in self.attachments:
            if not attachment.read or not attachment.applies_to(current):
                continue
            items = self.stores[attachment.name].retrieve(
                agent_role, snapshot or "", attachment.top_k, attachment.similarity_threshold
            )
            ranked += [(attachment.name, item, devall_rank(item, text, now)) for item in items]
        if not ranked:
            return None
        ranked.sort(key=lambda entry: entry[2], reverse=True)
        sections: dict[str, list[MemoryItem]] = {}
        for name, item, _ in ranked:
            sections.setdefault(name, []).append(item)
        lines = [HEADER]
        for name, items in sections.items():
            lines.append(f"\n--- {name} ---")
            lines += [f"{i}. {item.content_summary}" for i, item in enumerate(items, 1)]
        lines.append(f"\n{FOOTER}")
        return MemoryRetrievalResult(formatted_text="\n".join(lines), items=[item for _, item, _ in ranked])

    def update(self, payload: MemoryWritePayload | Mapping[str, Any] | Any) -> dict[str, bool]:
        """After the node ran: write to every writable attachment (read-only stores are skipped).
        ``payload`` may be DevAll's ``MemoryWritePayload``. Returns ``{store name: whether an item was
        stored}``."""
        payload = payload_of(payload)
        written: dict[str, bool] = {}
        for attachment in self.attachments:
            store = self.stores[attachment.name]
            if not attachment.write:
                continue
            if not store.writable:
                log.debug("memory store %s is read-only; not writing to it", attachment.name)
                continue
            written[attachment.name] = store.update(payload)
            store.save()
        return written
