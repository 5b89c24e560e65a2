"""LangGraph's long-term memory store (``BaseStore``) on pgmem: ``pip install 'pgmem[langgraph]'``.

Example:
    >>> from pgmem.integrations.langgraph import PgmemStore
    >>> with PgmemStore.from_conn_string(index={"dims": 384, "embed": my_embeddings}) as store:
    ...     store.put(("users", "u1"), "prefs", {"text": "likes short answers"})
    ...     store.search(("users",), query="answer length")
"""

from pgmem.integrations._adapters import require

require("langgraph.store.base", "langgraph", "langgraph")

from pgmem.integrations.langgraph.store import AsyncPgmemStore, InvalidNamespace, PgmemStore  # noqa: E402

__all__ = ["AsyncPgmemStore", "InvalidNamespace", "PgmemStore"]
