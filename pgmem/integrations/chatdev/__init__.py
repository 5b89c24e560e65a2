"""ChatDev-style memory stores on Postgres: ``simple``, ``file`` and ``blackboard``, a registry, YAML
configuration and a ``MemoryManager``.

Every store keeps its items as messages of the memory ``store:<name>`` in the client's namespace
(``pgmem.memory_stores`` records its type and config; ``pgmem.store_files`` what a file store indexed),
so it is durable when a write returns and shared by every process that configures the same name.

Example:
    >>> from pgmem.integrations.chatdev import build_stores, MemoryManager, MemoryWritePayload, MemoryContentSnapshot
    >>> stores = build_stores('''
    ... memory:
    ...   - name: convo
    ...     type: simple
    ...     config: {rescore: jaccard}
    ...   - name: board
    ...     type: blackboard
    ...     config: {max_items: 100}
    ... ''', client=client)
    >>> manager = MemoryManager([{"name": "convo"}, {"name": "board"}], stores)
"""

from pgmem.errors import ConfigError
from pgmem.integrations.chatdev.base import (
    MemoryContentSnapshot,
    MemoryItem,
    MemoryRetrievalResult,
    MemoryStore,
    MemoryWritePayload,
    StoreConfig,
)
from pgmem.integrations.chatdev.blackboard import BlackboardMemoryConfig, BlackboardMemoryStore
from pgmem.integrations.chatdev.config import (
    STAGES,
    MemoryAttachmentConfig,
    MemoryDesign,
    MemoryStoreConfig,
    build_stores,
    load_design,
    load_memory_config,
    parse_design,
    parse_memory_config,
    resolve_placeholders,
)
from pgmem.integrations.chatdev.file import FileMemoryConfig, FileMemoryStore, FileSource, IndexReport, chunk_text
from pgmem.integrations.chatdev.manager import MemoryManager
from pgmem.integrations.chatdev.registry import (
    MemoryStoreRegistration,
    get_memory_store_registration,
    iter_memory_store_registrations,
    register_memory_store,
)
from pgmem.integrations.chatdev.simple import (
    EmbeddingConfig,
    SimpleMemoryConfig,
    SimpleMemoryStore,
    devall_similarity,
    extract_key_content,
)

__all__ = [
    "STAGES",
    "BlackboardMemoryConfig",
    "BlackboardMemoryStore",
    "ConfigError",
    "EmbeddingConfig",
    "FileMemoryConfig",
    "FileMemoryStore",
    "FileSource",
    "IndexReport",
    "MemoryAttachmentConfig",
    "MemoryContentSnapshot",
    "MemoryDesign",
    "MemoryItem",
    "MemoryManager",
    "MemoryRetrievalResult",
    "MemoryStore",
    "MemoryStoreConfig",
    "MemoryStoreRegistration",
    "MemoryWritePayload",
    "SimpleMemoryConfig",
    "SimpleMemoryStore",
    "StoreConfig",
    "build_stores",
    "chunk_text",
    "devall_similarity",
    "extract_key_content",
    "get_memory_store_registration",
    "iter_memory_store_registrations",
    "load_design",
    "load_memory_config",
    "parse_design",
    "parse_memory_config",
    "register_memory_store",
    "resolve_placeholders",
]


def _register_builtins() -> None:
    if "simple" in iter_memory_store_registrations():
        return
    register_memory_store(
        "simple",
        SimpleMemoryConfig,
        lambda name, config, client: SimpleMemoryStore(name, config, client=client),
        "read/write; vector retrieval re-scored lexically (DevAll's score); de-duplicated by summary",
    )
    register_memory_store(
        "file",
        FileMemoryConfig,
        lambda name, config, client: FileMemoryStore(name, config, client=client),
        "read-only; chunked files and folders, re-indexed when a file's hash changes",
    )
    register_memory_store(
        "blackboard",
        BlackboardMemoryConfig,
        lambda name, config, client: BlackboardMemoryStore(name, config, client=client),
        "append-only log trimmed by count and age, read by recency, no vectors",
    )


_register_builtins()
