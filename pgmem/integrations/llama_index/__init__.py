"""LlamaIndex's chat stores on pgmem: ``pip install 'pgmem[llama-index]'``.

* :class:`PgmemChatStore`, a ``BaseChatStore`` (chat engines, ``ChatMemoryBuffer``).
* :class:`PgmemDBChatStore`, an ``AsyncDBChatStore`` with ACTIVE and ARCHIVED messages, for
  ``Memory.from_defaults(chat_store=PgmemDBChatStore(client=client))``.

Example:
    >>> from llama_index.core.memory import Memory
    >>> from pgmem.integrations.llama_index import PgmemDBChatStore
    >>> memory = Memory.from_defaults(session_id="user-42", chat_store=PgmemDBChatStore(client=client))
"""

from pgmem.integrations._adapters import require

require("llama_index.core", "llama-index", "llama_index")

from pgmem.integrations.llama_index.chat_store import PgmemChatStore, PgmemDBChatStore  # noqa: E402

__all__ = ["PgmemChatStore", "PgmemDBChatStore"]
