"""pgmem's message model, shared by every facade.

:class:`Message` is a plain class with slots, not a pydantic model: pydantic costs an agent process about
50 ms of CPU to import (a fifth of a cold start, benchmarks/startup.py), and a process that only reads
messages back should not pay it. It keeps pydantic's spelling where users reach for it
(``model_dump``, ``model_validate``, ``model_copy``) and works as a field type inside pydantic models
(``list[Message]``), validating and serialising through the same rules.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeGuard

from pgmem.errors import InvalidInput

if TYPE_CHECKING:
    from pydantic import BaseModel, GetCoreSchemaHandler
    from pydantic_core import CoreSchema

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


def is_pydantic_model(value: Any) -> TypeGuard[BaseModel]:
    """Whether ``value`` is a pydantic model instance, without importing pydantic (if pydantic was never
    imported, nothing can be one)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"Message.{field} must be a string, not {type(value).__name__}")
    return value


def _optional_text(value: Any, field: str) -> str | None:
    return None if value is None else _text(value, field)


def aware(moment: datetime) -> datetime:
    """``moment`` with a time zone: a naive one is taken as UTC (not as the database server's local time,
    which is how PostgreSQL would read it into a ``timestamptz``)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _created_at(value: Any) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if isinstance(value, datetime):
        return aware(value)
    if isinstance(value, str):
        try:
            return aware(datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value))
        except ValueError:
            pass
    raise InvalidInput(f"Message.created_at must be a datetime or an ISO 8601 string, not {value!r:.80}")


def _instruct_content(value: Any) -> Any:
    if value is None or isinstance(value, dict) or is_pydantic_model(value):
        return value
    raise InvalidInput(f"Message.instruct_content must be a pydantic model or a dict, not {type(value).__name__}")


def _tool_calls(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidInput(f"Message.tool_calls must be a list of dicts, not {type(value).__name__}")
    calls = list(value)
    for call in calls:
        if not isinstance(call, dict):
            raise InvalidInput(f"Message.tool_calls must be a list of dicts; found a {type(call).__name__}")
    return calls


_UNSET: Any = object()


class Message:
    """One message of an agent conversation.

    Example:
        >>> m = Message(content="Write a PRD", role="user", cause_by="UserRequirement", send_to={"PM"})
        >>> m.send_to
        {'PM'}

    ``cause_by`` and ``sent_from`` accept a class (stored as ``module.ClassName``) or a string;
    ``send_to`` accepts a name, a class or an iterable of them (default: broadcast, ``{"<all>"}``).
    ``created_at`` accepts a datetime or an ISO 8601 string (default: now, UTC; one without a time zone
    is UTC, whatever the database server's ``TimeZone``). A value of the wrong type
    raises :class:`pgmem.InvalidInput` (a ValueError) naming the field. Two messages are equal when their
    ids are equal; messages carrying MetaGPT's ignored id (``"0"``) are equal when their contents are.
    Attributes can be assigned; what is stored is checked again when it is written.
    """

    __slots__ = (
        "id",
        "content",
        "instruct_content",
        "role",
        "cause_by",
        "sent_from",
        "send_to",
        "metadata",
        "tool_calls",
        "name",
        "tool_call_id",
        "created_at",
        "_source_class",
        "_seq",
    )

    #: The message's fields, in order (pydantic's ``model_fields`` names the same ones).
    FIELDS: ClassVar[tuple[str, ...]] = __slots__[:12]

    id: str
    content: str
    instruct_content: Any
    role: str
    cause_by: str
    sent_from: str
    send_to: set[str]
    metadata: dict[str, Any]
    tool_calls: list[dict[str, Any]] | None
    name: str | None
    tool_call_id: str | None
    created_at: datetime
    # The caller's message class (``module.ClassName``) when a facade converted it; stored so that other
    # processes can return the same class.
    _source_class: str | None
    # Position in the memory it was read from (the memory entry's sequence number).
    _seq: int | None

    def __init__(
        self,
        *,
        id: str | None = None,  # noqa: A002 - MetaGPT's and OpenAI's field name
        content: str = "",
        instruct_content: Any = None,
        role: str = "user",
        cause_by: Any = "",
        sent_from: Any = "",
        send_to: Any = _UNSET,
        metadata: Mapping[str, Any] | None = None,
        tool_calls: Iterable[dict[str, Any]] | None = None,
        name: str | None = None,
        tool_call_id: str | None = None,
        created_at: datetime | str | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex if id is None else _text(id, "id")
        self.content = _text(content, "content")
        self.instruct_content = _instruct_content(instruct_content)
        self.role = _text(role, "role")
        self.cause_by = "" if cause_by is None else any_to_str(cause_by)
        self.sent_from = "" if sent_from is None else any_to_str(sent_from)
        names = {MESSAGE_ROUTE_TO_ALL} if send_to is _UNSET else any_to_str_set(send_to)
        self.send_to = names if names else {MESSAGE_ROUTE_TO_ALL}
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInput(f"Message.metadata must be a dict, not {type(metadata).__name__}")
        self.metadata = {} if metadata is None else dict(metadata)
        self.tool_calls = _tool_calls(tool_calls)
        self.name = _optional_text(name, "name")
        self.tool_call_id = _optional_text(tool_call_id, "tool_call_id")
        self.created_at = _created_at(created_at)
        self._source_class = None
        self._seq = None

    # -- pydantic's spelling ---------------------------------------------------------------------------

    @classmethod
    def model_validate(cls, obj: Any) -> Message:
        """A message from a dict of its fields (as :meth:`model_dump` gives, in either mode), or the
        message itself. Unknown keys are ignored, as pydantic does by default."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, Mapping):
            raise InvalidInput(f"a Message is built from a dict of its fields, not {type(obj).__name__}")
        return cls(**{k: obj[k] for k in cls.FIELDS if k in obj})

    def model_dump(
        self,
        *,
        mode: Literal["python", "json"] = "python",
        include: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """The fields as a dict. ``mode="json"``: JSON types only (``send_to`` a sorted list,
        ``created_at`` an ISO 8601 string, a pydantic ``instruct_content`` dumped to a dict)."""
        names: Iterable[str] = self.FIELDS if include is None else [f for f in self.FIELDS if f in set(include)]
        skip = set(exclude or ())
        out = {name: getattr(self, name) for name in names if name not in skip}
        if mode == "json":
            if "send_to" in out:
                out["send_to"] = sorted(out["send_to"])
            if "created_at" in out:
                out["created_at"] = out["created_at"].isoformat()
            if is_pydantic_model(out.get("instruct_content")):
                out["instruct_content"] = out["instruct_content"].model_dump(mode="json")
        else:
            for name in ("send_to", "metadata"):
                if name in out:
                    out[name] = type(out[name])(out[name])
        return out

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Message:
        """A copy, with ``update``'s fields replaced (not validated, as in pydantic)."""
        import copy

        new = copy.deepcopy(self) if deep else copy.copy(self)
        for name, value in (update or {}).items():
            if name not in self.FIELDS:
                raise InvalidInput(f"Message has no field {name!r}")
            setattr(new, name, value)
        return new

    def __copy__(self) -> Message:
        new = object.__new__(Message)
        for name in self.__slots__:
            object.__setattr__(new, name, getattr(self, name))
        new.send_to = set(self.send_to)
        new.metadata = dict(self.metadata)
        return new

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Use ``Message`` as a field of a pydantic model: validated by :meth:`model_validate`, dumped by
        :meth:`model_dump` (in the serialiser's mode)."""
        from pydantic_core import core_schema

        def serialize(message: Message, info: core_schema.SerializationInfo) -> dict[str, Any]:
            return message.model_dump(mode="json" if info.mode_is_json() else "python")

        return core_schema.no_info_plain_validator_function(
            cls.model_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(serialize, info_arg=True),
        )

    # -- identity --------------------------------------------------------------------------------------

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

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"Message({fields})"

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, state.get(name))

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
