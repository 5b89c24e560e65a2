"""OpenManus's message schema (``app.schema``): roles, tool calls and the message factories."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel


class Role(str, Enum):  # noqa: UP042 - OpenManus's own definition; StrEnum formats differently
    """Message roles of the OpenAI chat format."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


ROLE_VALUES = tuple(role.value for role in Role)
ROLE_TYPE = Literal["system", "user", "assistant", "tool"]


class Function(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    """A tool (function) call requested by the assistant."""

    id: str
    type: str = "function"
    function: Function


class Message(BaseModel):
    """A chat message in the OpenAI format.

    Example:
        >>> conversation = Message.system_message("Be brief") + [Message.user_message("hi")]
    """

    role: ROLE_TYPE
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    base64_image: str | None = None

    def __add__(self, other: Any) -> list[Message]:
        if isinstance(other, list):
            return [self, *other]
        if isinstance(other, Message):
            return [self, other]
        raise TypeError(f"unsupported operand type(s) for +: '{type(self).__name__}' and '{type(other).__name__}'")

    def __radd__(self, other: Any) -> list[Message]:
        if isinstance(other, list):
            return [*other, self]
        raise TypeError(f"unsupported operand type(s) for +: '{type(other).__name__}' and '{type(self).__name__}'")

    def to_dict(self) -> dict[str, Any]:
        """The message as the OpenAI API expects it (fields that are None left out)."""
        message: dict[str, Any] = {"role": self.role}
        if self.content is not None:
            message["content"] = self.content
        if self.tool_calls is not None:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.name is not None:
            message["name"] = self.name
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.base64_image is not None:
            message["base64_image"] = self.base64_image
        return message

    @classmethod
    def user_message(cls, content: str, base64_image: str | None = None) -> Message:
        return cls(role=Role.USER.value, content=content, base64_image=base64_image)

    @classmethod
    def system_message(cls, content: str) -> Message:
        return cls(role=Role.SYSTEM.value, content=content)

    @classmethod
    def assistant_message(cls, content: str | None = None, base64_image: str | None = None) -> Message:
        return cls(role=Role.ASSISTANT.value, content=content, base64_image=base64_image)

    @classmethod
    def tool_message(cls, content: str, name: str, tool_call_id: str, base64_image: str | None = None) -> Message:
        return cls(
            role=Role.TOOL.value, content=content, name=name, tool_call_id=tool_call_id, base64_image=base64_image
        )

    @classmethod
    def from_tool_calls(
        cls, tool_calls: list[Any], content: str | list[str] = "", base64_image: str | None = None, **kwargs: Any
    ) -> Message:
        """An assistant message carrying raw tool calls from an LLM response (objects with ``id`` and
        ``function``)."""
        calls = [
            ToolCall(id=call.id, function=Function.model_validate(call.function.model_dump()), type="function")
            for call in tool_calls
        ]
        text = content if isinstance(content, str) else "\n".join(content)
        return cls(role=Role.ASSISTANT.value, content=text, tool_calls=calls, base64_image=base64_image, **kwargs)
