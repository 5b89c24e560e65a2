"""pgmem: Postgres-native memory for LLM agents.

>>> import pgmem
>>> with pgmem.connect(namespace="demo") as client:
...     client.messages.add("role:Alice", pgmem.Message(content="Write a PRD", cause_by="UserRequirement"))
...     client.messages.last("role:Alice", 10)
"""

from pgmem._async.client import AsyncClient, aconnect
from pgmem._async.messages import AsyncMessageRepository
from pgmem._sync.client import Client, connect
from pgmem._sync.messages import MessageRepository
from pgmem.checks import MAX_BATCH, MAX_CONTENT_BYTES, MAX_JSON_BYTES, MAX_NAME_CHARS
from pgmem.errors import (
    ClientClosed,
    ConfigError,
    Conflict,
    ConnectionFailed,
    DemoIncomplete,
    EmbeddingError,
    InvalidInput,
    LeaseLost,
    NotFound,
    PgmemError,
    SchemaOutOfDate,
    SummaryError,
)
from pgmem.models import IGNORED_MESSAGE_ID, MESSAGE_ROUTE_TO_ALL, Message, any_to_str

__version__ = "0.1.0"

__all__ = [
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
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "DemoIncomplete",
    "EmbeddingError",
    "InvalidInput",
    "LeaseLost",
    "Message",
    "MessageRepository",
    "NotFound",
    "PgmemError",
    "SchemaOutOfDate",
    "SummaryError",
    "aconnect",
    "any_to_str",
    "connect",
]
