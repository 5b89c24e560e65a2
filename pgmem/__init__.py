"""pgmem: Postgres-native memory for LLM agents.

>>> import pgmem
>>> with pgmem.connect(namespace="demo") as client:
...     client.messages.add("role:Alice", pgmem.Message(content="Write a PRD", cause_by="UserRequirement"))
...     client.messages.last("role:Alice", 10)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pgmem.checks import MAX_BATCH, MAX_CONTENT_BYTES, MAX_JSON_BYTES, MAX_NAME_CHARS
from pgmem.connecting import aconnect, connect
from pgmem.errors import (
    ClientClosed,
    CommitUnknown,
    ConfigError,
    Conflict,
    ConnectionFailed,
    DemoIncomplete,
    DimensionMismatch,
    EmbeddingError,
    InvalidInput,
    LeaseLost,
    MissingExtra,
    NotFound,
    PermissionDenied,
    PgmemError,
    ResourceExhausted,
    SchemaDrift,
    SchemaOutOfDate,
    SchemaTooNew,
    ServerError,
    SummaryError,
    Timeout,
)
from pgmem.models import IGNORED_MESSAGE_ID, MESSAGE_ROUTE_TO_ALL, Message, any_to_str
from pgmem.planning.distances import DISTANCES

if TYPE_CHECKING:
    from pgmem._async.client import AsyncClient
    from pgmem._async.messages import AsyncMessageRepository
    from pgmem._sync.client import Client
    from pgmem._sync.messages import MessageRepository
    from pgmem.embeddings import Precomputed

#: The classes of each flavour, imported on first use (PEP 562): a sync agent process never loads the
#: async flavour, nor an async one the sync flavour (``pgmem.connect`` / ``pgmem.aconnect`` load theirs).
_LAZY = {
    "AsyncClient": "pgmem._async.client",
    "AsyncMessageRepository": "pgmem._async.messages",
    "Client": "pgmem._sync.client",
    "MessageRepository": "pgmem._sync.messages",
    # The model of your own vectors (client.vectors.enable(memory, pgmem.Precomputed(name, dimension))).
    "Precomputed": "pgmem.embeddings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "DISTANCES",
    "IGNORED_MESSAGE_ID",
    "MAX_BATCH",
    "MAX_CONTENT_BYTES",
    "MAX_JSON_BYTES",
    "MAX_NAME_CHARS",
    "MESSAGE_ROUTE_TO_ALL",
    "AsyncClient",
    "AsyncMessageRepository",
    "Client",
    "ClientClosed",
    "CommitUnknown",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "DemoIncomplete",
    "DimensionMismatch",
    "EmbeddingError",
    "InvalidInput",
    "LeaseLost",
    "Message",
    "MessageRepository",
    "MissingExtra",
    "NotFound",
    "PermissionDenied",
    "PgmemError",
    "Precomputed",
    "ResourceExhausted",
    "SchemaDrift",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "ServerError",
    "SummaryError",
    "Timeout",
    "aconnect",
    "any_to_str",
    "connect",
]
