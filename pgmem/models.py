"""pgmem's message model (pydantic v2), shared by every facade."""

from __future__ import annotations

import hashlib
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

#: MetaGPT's ``metagpt.const.IGNORED_MESSAGE_ID``: messages carrying it are compared by content.
IGNORED_MESSAGE_ID = "0"
#: MetaGPT's ``MESSAGE_ROUTE_TO_ALL``: the default ``send_to`` (broadcast).
MESSAGE_ROUTE_TO_ALL = "<all>"


def any_to_str(value: Any) -> str:
    """Name an action, role or class the way MetaGPT does: strings as they are, classes as
    ``module.ClassName``, other objects by their class."""
    if isinstance(value, str):
        return value
    if isinstance(value, type) or callable(value):
        return f"{value.__module__}.{value.__name__}"
    cls = type(value)
    return f"{cls.__module__}.{cls.__name__}"


def any_to_str_set(values: Any) -> set[str]:
    if values is None:
        return set()
    if isinstance(values, str | type) or not hasattr(values, "__iter__"):
        return {any_to_str(values)}
    if isinstance(values, dict):
        return {any_to_str(v) for v in values.values()}
    return {any_to_str(v) for v in values}


def _new_id() -> str:
    return uuid.uuid4().hex


def _now() -> datetime:
    return datetime.now(UTC)


class Message(BaseModel):
    """One message of an agent conversation.

    Example:
        >>> m = Message(content="Write a PRD", role="user", cause_by="UserRequirement", send_to={"PM"})
        >>> m.send_to
        {'PM'}

    ``cause_by`` and ``sent_from`` accept a class (stored as ``module.ClassName``) or a string;
    ``send_to`` accepts a name, a class or an iterable of them (default: broadcast, ``{"<all>"}``).
    Two messages are equal when their ids are equal; messages carrying MetaGPT's ignored id (``"0"``)
    are equal when their contents are.
    """

    # defer_build: pydantic builds the validator (~19 ms of CPU) when the first Message is validated, not
    # at import. Messages read back are built without validation (pgmem.planning.rows.decode), so a
    # process that only reads never pays it (benchmarks/startup.py).
    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=False, defer_build=True)

    id: str = Field(default_factory=_new_id)
    content: str = ""
    # Any pydantic model instance or a dict, kept as given (a plain annotation would make pydantic try to
    # build a bare BaseModel out of a dict).
    instruct_content: Any = None
    role: str = "user"
    cause_by: str = ""
    sent_from: str = ""
    send_to: set[str] = Field(default_factory=lambda: {MESSAGE_ROUTE_TO_ALL})
    metadata: dict[str, Any] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    created_at: datetime = Field(default_factory=_now)

    # The caller's message class (``module.ClassName``) when a facade converted it; stored so that other
    # processes can return the same class.
    _source_class: str | None = PrivateAttr(default=None)
    # Position in the memory it was read from (the memory entry's sequence number).
    _seq: int | None = PrivateAttr(default=None)

    @field_validator("cause_by", "sent_from", mode="before")
    @classmethod
    def _name_of(cls, value: Any) -> str:
        return "" if value is None else any_to_str(value)

    @field_validator("instruct_content", mode="before")
    @classmethod
    def _model_or_dict(cls, value: Any) -> Any:
        if value is None or isinstance(value, BaseModel | dict):
            return value
        raise ValueError(f"instruct_content must be a pydantic model or a dict, not {type(value).__name__}")

    @field_validator("send_to", mode="before")
    @classmethod
    def _names_of(cls, value: Any) -> set[str]:
        names = any_to_str_set(value)
        return names if names else {MESSAGE_ROUTE_TO_ALL}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        if self.id == IGNORED_MESSAGE_ID and other.id == IGNORED_MESSAGE_ID:
            return self.content == other.content
        return self.id == other.id

    def __hash__(self) -> int:
        return hash(("content", self.content) if self.id == IGNORED_MESSAGE_ID else ("id", self.id))

    def __str__(self) -> str:
        return f"{self.role}: {self.content}"

    @property
    def seq(self) -> int | None:
        """The message's position in the memory it was read from (None for a message not read back)."""
        return self._seq


# -- how messages are identified in storage -------------------------------------------------------------
# Messages that carry MetaGPT's ignored id are stored under an id derived from their content, so that
# "the same message" (by content) is stored once. '~' is not allowed in caller ids, so these never clash.
_CONTENT_ID_PREFIX = IGNORED_MESSAGE_ID + "~"


def storage_id(message: Message) -> str:
    """The id ``message`` is stored under (see :func:`storage_id_of`)."""
    return storage_id_of(message.id, message.content)


def storage_id_of(message_id: str, content: str) -> str:
    """The id a message is stored under: its own, or one derived from its content for MetaGPT's ignored id."""
    if message_id == IGNORED_MESSAGE_ID:
        return _CONTENT_ID_PREFIX + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return message_id


def public_id(stored: str) -> str:
    """The id a stored message is given back under (MetaGPT's ignored id for content-derived ones)."""
    return IGNORED_MESSAGE_ID if stored.startswith(_CONTENT_ID_PREFIX) else stored


def resolve_class(path: str) -> type | None:
    """Find an already imported class by ``module.QualName``; never imports (the path comes from the DB)."""
    module_name, _, qualname = path.rpartition(".")
    while module_name:
        module = sys.modules.get(module_name)
        if module is not None:
            obj: Any = module
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj if isinstance(obj, type) else None
        module_name, _, head = module_name.rpartition(".")
        qualname = f"{head}.{qualname}"
    return None
