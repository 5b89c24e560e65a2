"""LangChain's chat message history on pgmem: ``pip install 'pgmem[langchain]'``.

Example:
    >>> from pgmem.integrations.langchain import PgmemChatMessageHistory
    >>> history = PgmemChatMessageHistory("user-42", client=pgmem.connect())
    >>> history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    >>> history.messages
    [HumanMessage(content='hi', ...), AIMessage(content='hello', ...)]
"""

from pgmem.integrations._adapters import require

require("langchain_core", "langchain", "langchain")

from pgmem.integrations.langchain.history import PgmemChatMessageHistory  # noqa: E402

__all__ = ["PgmemChatMessageHistory"]
