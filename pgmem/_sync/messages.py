# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""The message repository: a namespace's messages and the memories that refer to them.

Composed of its parts: the writes (:mod:`pgmem._async.message_writes`), the removals
(:mod:`pgmem._async.message_removals`) and the reads (:mod:`pgmem._async.message_reads`), on what they share
(:mod:`pgmem._async.message_base`)."""

from __future__ import annotations

from pgmem._sync.message_reads import MessageReads
from pgmem._sync.message_removals import MessageRemovals
from pgmem._sync.message_writes import MessageWrites

__all__ = ["MessageRepository"]


class MessageRepository(MessageWrites, MessageRemovals, MessageReads):
    """Messages of one namespace and the memories (named lists of messages) that hold them.

    A message is stored once per namespace; each memory refers to it (``memory_entries``) in the order it
    was added. Every method takes ``connection=``: pass your own connection to run inside your
    transaction (pgmem never commits or rolls it back).

    Example:
        >>> repo = client.messages
        >>> await repo.add("role:Alice", Message(content="hello", cause_by="UserRequirement"))
        True
        >>> [m.content for m in await repo.last("role:Alice", 10)]
        ['hello']
    """
