"""MetaGPT's memory APIs on Postgres: durable, shared between processes, queryable with SQL.

``from pgmem.integrations.metagpt import Memory`` is a drop-in for ``metagpt.memory.Memory`` with the same method
names, arguments and semantics, taking and returning the caller's own message class.
"""

from pgmem.integrations.metagpt.brain import BrainMemory
from pgmem.integrations.metagpt.longterm import LongTermMemory, MemoryStorage, RoleZeroLongTermMemory
from pgmem.integrations.metagpt.memory import Memory, MemoryIndex
from pgmem.integrations.metagpt.message_queue import MessageQueue

__all__ = [
    "BrainMemory",
    "LongTermMemory",
    "Memory",
    "MemoryIndex",
    "MemoryStorage",
    "MessageQueue",
    "RoleZeroLongTermMemory",
]
