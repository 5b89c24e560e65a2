"""``MemoryManager``: what a node reads from its stores before it runs and writes to them after."""

from __future__ import annotations

import logging
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
from pgmem.integrations.chatdev.config import MemoryAttachmentConfig

__all__ = ["MemoryManager"]

log = logging.getLogger("pgmem.integrations.chatdev")

HEADER = "===== Related Memories ====="
FOOTER = "===== End of Memory ====="


class MemoryManager:
    """A node's memory attachments over shared stores.

    Args:
        attachments: :class:`MemoryAttachmentConfig` objects or dicts (``name``, ``retrieve_stage``,
            ``top_k``, ``similarity_threshold``, ``read``, ``write``).
        stores: the stores by name (e.g. from :func:`pgmem.integrations.chatdev.build_stores`).

    Raises:
        ConfigError: an attachment names a store that does not exist, or a store twice.

    Example:
        >>> manager = MemoryManager([{"name": "convo", "retrieve_stage": ["gen"]}, {"name": "docs", "write": False}],
        ...                         stores)
        >>> context = manager.retrieve("coder", "how is the board drawn?", stage="gen")
        >>> print(context.formatted_text)  # one block, grouped by store
        >>> manager.update(MemoryWritePayload(agent_role="coder", inputs_text="...", output_snapshot=...))
    """

    def __init__(
        self, attachments: Sequence[MemoryAttachmentConfig | Mapping[str, Any]], stores: Mapping[str, MemoryStore]
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
        self, agent_role: str, query: MemoryContentSnapshot | str, stage: str | None = None
    ) -> MemoryRetrievalResult | None:
        """Read every readable attachment whose ``retrieve_stage`` includes ``stage`` and format the items
        as one context block (a section per store, in attachment order). None when nothing was found."""
        sections: list[tuple[str, list[MemoryItem]]] = []
        for attachment in self.attachments:
            if not attachment.read or not attachment.applies_to(stage):
                continue
            items = self.stores[attachment.name].retrieve(
                agent_role, query, attachment.top_k, attachment.similarity_threshold
            )
            if items:
                sections.append((attachment.name, items))
        if not sections:
            return None
        lines = [HEADER]
        for name, items in sections:
            lines.append(f"\n--- {name} ---")
            lines += [f"{i}. {item.content_summary}" for i, item in enumerate(items, 1)]
        lines.append(f"\n{FOOTER}")
        return MemoryRetrievalResult(formatted_text="\n".join(lines), items=[i for _, items in sections for i in items])

    def update(self, payload: MemoryWritePayload | Mapping[str, Any]) -> dict[str, bool]:
        """After the node ran: write to every writable attachment (read-only stores are skipped).
        Returns ``{store name: whether an item was stored}``."""
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
