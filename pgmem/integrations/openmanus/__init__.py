"""OpenManus's ``Memory`` and ``Message`` on Postgres.

``Memory`` keeps a sliding window of the last ``max_messages`` messages like OpenManus's, but the window
is a view over durable rows: older messages stay in the database (and in SQL analytics) unless you purge
them, and the window never starts with a tool result whose assistant tool call fell outside it
(OpenManus issue 744: the OpenAI API rejects such a conversation).
"""

from pgmem.integrations.openmanus.memory import Memory
from pgmem.integrations.openmanus.schema import ROLE_TYPE, ROLE_VALUES, Function, Message, Role, ToolCall

__all__ = ["ROLE_TYPE", "ROLE_VALUES", "Function", "Memory", "Message", "Role", "ToolCall"]
