"""OpenManus's ``Memory`` and ``Message`` on Postgres.

``Memory`` keeps a sliding window of the last ``max_messages`` messages like OpenManus's, but the window
is a view over durable rows: older messages stay in the database (and in SQL analytics) unless you purge
them, and the window is always a conversation the OpenAI API accepts (no tool result whose assistant
tool call fell outside it, OpenManus issue 744). It takes and returns OpenManus's own ``app.schema.Message``
(or this module's ``Message``), and can be an OpenManus agent's ``memory``.
"""

from pgmem.integrations.openmanus.memory import Memory, openmanus_memory_class, valid_conversation
from pgmem.integrations.openmanus.schema import ROLE_TYPE, ROLE_VALUES, Function, Message, Role, ToolCall

__all__ = [
    "ROLE_TYPE",
    "ROLE_VALUES",
    "Function",
    "Memory",
    "Message",
    "Role",
    "ToolCall",
    "openmanus_memory_class",
    "valid_conversation",
]
