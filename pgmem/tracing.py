"""Spans of the public repository calls (OpenTelemetry), with the ``otel`` extra; nothing without it.

Every public call of a client's repositories (``client.messages.add``, ``client.queues.claim``,
``client.vectors.search``, ...; both flavours) is one span, ``CLIENT`` kind, named as the database
semantic conventions name a span, ``{db.operation.name} {db.namespace}``:

- ``db.system.name`` ``postgresql``; ``db.namespace`` the database and pgmem's schema (``mydb.pgmem``: the
  PostgreSQL conventions qualify the schema by the database); ``db.operation.name`` the repository call
  (``messages.add``); ``server.address`` and ``server.port`` (from the client's DSN, without its password);
- pgmem's own: ``pgmem.namespace`` (the tenant), and from the call's arguments the keys ``pgmem.memory``
  and ``pgmem.queue`` and the counts ``pgmem.k`` and ``pgmem.n``. Never a message's content, metadata,
  a query's text or a statement;
- a call that fails: status ERROR, ``error.type`` (the exception's qualified class name),
  ``db.response.status_code`` (its SQLSTATE, when the server raised it) and an ``exception`` event whose
  message is redacted (:func:`pgmem.errors.redact`: no password or API key) and has every string the
  caller passed masked (content, metadata values, keys: a server's DETAIL may quote them).

A call that makes another (``queues.inbox`` claims through ``queues.claim``) is the other's parent.

How it costs nothing when unused: :func:`instrument` runs once per repository class, as the class is
created (``__init_subclass__`` of :class:`pgmem._async.base.AsyncRepository` and its sync twin). Without
OpenTelemetry's API installed (or with ``pgmem`` in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``) it wraps
nothing: the methods are the functions written. With it, each call first looks for
``opentelemetry.trace`` among the imported modules (pgmem never imports it: ~20 ms) and then for a
configured tracer provider, and calls the method as it is when there is neither (under 1 us a call). A
span recorded costs what the SDK costs, 15-40 us on the 2-core VM (benchmarks/telemetry.py).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pgmem.errors import redact
from pgmem.models import Message

__all__ = ["REPOSITORIES", "enabled", "instrument", "traced_methods"]

#: The repositories a client exposes (class name without ``Async`` -> the name in a span). The core's
#: helpers beneath them (the model registry, the planner, the searcher, the outbox) get no span of their
#: own: their work is part of the public call that made it.
REPOSITORIES = {
    "MessageRepository": "messages",
    "QueueRepository": "queues",
    "VectorRepository": "vectors",
    "SummaryRepository": "summaries",
    "BrainRepository": "brains",
    "Retention": "retention",
    "StoreRepository": "stores",
    "ItemRepository": "items",
    "ContextBuilder": "context",
    "ForkRepository": "forks",
}

#: Public methods that are not database calls: plain functions in the async source (the sync twin cannot
#: tell them apart by their kind), and ``close`` (the client's own shutdown, not its user's call).
#: tests/unit/test_telemetry_hook.py keeps the list in step.
NOT_CALLS = frozenset(
    {
        "add_change_listener",
        "changed",
        "close",
        "due",
        "embedder_for",
        "forget_model",
        "kick",
        "remove_change_listener",
        "written",
    }
)

#: Arguments recorded as attributes: keys and counts, never values a caller stores.
_KEYS = {"memory": "pgmem.memory", "queue": "pgmem.queue"}
_COUNTS = {"k": "pgmem.k", "n": "pgmem.n"}

_ENV_DISABLED = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"  # the contrib instrumentations' opt-out list
_SCHEMA = "pgmem"  # every table pgmem uses is in this schema
_MARK = "__pgmem_traced__"
_ATTRIBUTES = "_pgmem_span_attributes"  # a repository's attributes of its client, worked out once

_enabled: bool | None = None


def enabled() -> bool:
    """Whether repository calls are instrumented in this process: OpenTelemetry's API can be imported
    (looked up, not imported) and ``pgmem`` is not in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``."""
    global _enabled
    if _enabled is None:
        disabled = {name.strip() for name in os.environ.get(_ENV_DISABLED, "").split(",")}
        try:
            found = importlib.util.find_spec("opentelemetry.trace") is not None
        except ImportError:  # no `opentelemetry` package at all (or a finder refusing it)
            found = False
        _enabled = found and "pgmem" not in disabled
    return _enabled


def _definitions(cls: type) -> dict[str, Any]:
    """What each name of ``cls`` is, found as an attribute lookup finds it, among ``cls`` and the parts it is
    composed of: its bases that are not repositories themselves (the message repository's writes, removals
    and reads). A repository another one derives from has its own spans."""
    found: dict[str, tuple[type, Any]] = {}
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            found.setdefault(name, (klass, value))
    return {
        name: value
        for name, (klass, value) in found.items()
        if klass is cls or klass.__name__.removeprefix("Async") not in REPOSITORIES
    }


def traced_methods(cls: type) -> list[str]:
    """The names of ``cls``'s methods that :func:`instrument` wraps (those defined on the class itself or
    on the parts it is composed of)."""
    if cls.__name__.removeprefix("Async") not in REPOSITORIES:
        return []
    return [
        name
        for name, value in _definitions(cls).items()
        if not name.startswith("_")
        and name not in NOT_CALLS
        and inspect.isfunction(value)  # not a staticmethod, classmethod or property
        and not (inspect.isgeneratorfunction(value) or inspect.isasyncgenfunction(value))
    ]


def instrument(cls: type) -> None:
    """Wrap each public call of the repository class ``cls`` in a span (see the module's docstring), once;
    nothing when :func:`enabled` is false or ``cls`` is not one of :data:`REPOSITORIES`."""
    if not enabled():
        return
    repository = REPOSITORIES.get(cls.__name__.removeprefix("Async"))
    if repository is None:
        return
    for name in traced_methods(cls):
        method = inspect.getattr_static(cls, name)  # a part's is wrapped on ``cls``, the part left as written
        if not getattr(method, _MARK, False):
            setattr(cls, name, _traced(method, f"{repository}.{name}"))


def _traced(method: Callable[..., Any], operation: str) -> Callable[..., Any]:
    signature = inspect.signature(method)
    positions = {name: i - 1 for i, name in enumerate(signature.parameters) if name in _KEYS or name in _COUNTS}

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def call_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            tracer = _tracer()
            if tracer is None:
                return await method(self, *args, **kwargs)
            with _Span(tracer, self, operation, positions, args, kwargs):
                return await method(self, *args, **kwargs)

        setattr(call_async, _MARK, True)
        return call_async

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = _tracer()
        if tracer is None:
            return method(self, *args, **kwargs)
        with _Span(tracer, self, operation, positions, args, kwargs):
            return method(self, *args, **kwargs)

    setattr(call, _MARK, True)
    return call


_provider: Any = None
_provider_tracer: Any = None
_UNKNOWN = object()
#: OpenTelemetry's API builds the global provider from this variable when first asked for it.
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _tracer() -> Any:
    """The tracer of the configured tracer provider, or None: OpenTelemetry not imported by anyone, or
    no provider set (its proxy provider's spans would record nothing)."""
    global _provider, _provider_tracer
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    # The global as set_tracer_provider() leaves it: get_tracer_provider() looks an environment variable up
    # on every call while none is set (~2 us, half a cheap read's overhead), so it is asked only when that
    # variable may name one (or when a later API stores its provider elsewhere).
    provider: Any = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None and not _PROVIDER_FROM_ENV:
        return None
    if provider is None or provider is _UNKNOWN:
        provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    if provider is not _provider:
        version = getattr(sys.modules.get("pgmem"), "__version__", None)
        _provider_tracer = provider.get_tracer("pgmem", version)
        _provider = provider
    return _provider_tracer


class _Span:
    """The span of one call, current while it runs."""

    __slots__ = ("_args", "_kwargs", "_scope", "_span", "_trace")

    def __init__(
        self,
        tracer: Any,
        repository: Any,
        operation: str,
        positions: Mapping[str, int],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self._trace = trace = sys.modules["opentelemetry.trace"]  # imported: _tracer found it there
        attributes = dict(_client_attributes(repository))
        attributes["db.operation.name"] = operation
        for name, position in positions.items():
            value = kwargs[name] if name in kwargs else args[position] if position < len(args) else None
            if name in _KEYS:
                if isinstance(value, str):
                    attributes[_KEYS[name]] = value
            elif isinstance(value, int) and not isinstance(value, bool):
                attributes[_COUNTS[name]] = value
        target = attributes.get("db.namespace")
        name = f"{operation} {target}" if target else operation
        self._span = tracer.start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes)
        self._args = args
        self._kwargs = kwargs
        self._scope: Any = None

    def __enter__(self) -> _Span:
        self._scope = self._trace.use_span(
            self._span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        )
        self._scope.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is not None and isinstance(exc, Exception) and self._span.is_recording():
                _record_error(self._span, exc, _strings((self._args, self._kwargs)))
        finally:
            self._scope.__exit__(kind, exc, tb)


def _client_attributes(repository: Any) -> dict[str, Any]:
    """The attributes every span of ``repository``'s calls has, from its client: worked out on its first
    recorded call (the DSN parsed once), then kept on the repository."""
    cached: dict[str, Any] | None = repository.__dict__.get(_ATTRIBUTES)
    if cached is not None:
        return cached
    client = repository._client
    attributes: dict[str, Any] = {"db.system.name": "postgresql", "pgmem.namespace": client.namespace}
    try:
        from psycopg.conninfo import conninfo_to_dict

        # The client's DSN for display (its password masked): only the database, host and port are read.
        parts = conninfo_to_dict(client.conninfo or "")
    except Exception:  # noqa: BLE001 - a DSN libpq cannot parse names no server: the attributes are left out
        parts = {}
    if parts.get("dbname"):
        attributes["db.namespace"] = f"{parts['dbname']}.{_SCHEMA}"
    host = str(parts.get("host") or "").split(",")[0]
    if host:
        attributes["server.address"] = host
    port = str(parts.get("port") or "").split(",")[0]
    if port.isdigit():
        attributes["server.port"] = int(port)
    repository.__dict__[_ATTRIBUTES] = attributes
    return attributes


def _record_error(span: Any, exc: Exception, passed: Iterable[str]) -> None:
    """Status ERROR, ``error.type``, the SQLSTATE, and an ``exception`` event with the message redacted."""
    from opentelemetry.trace import Status, StatusCode

    kind = type(exc)
    qualified = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    # Longest first: a string that contains a shorter one is masked whole.
    message = redact(str(exc), sorted(set(passed), key=len, reverse=True))
    span.set_attribute("error.type", qualified)
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        span.set_attribute("db.response.status_code", sqlstate)
    span.add_event("exception", {"exception.type": qualified, "exception.message": message})
    span.set_status(Status(StatusCode.ERROR, f"{kind.__name__}: {message}"))


def _strings(value: Any, depth: int = 0) -> Iterable[str]:
    """Every string in a call's arguments (message fields, metadata keys and values, lists of them), to
    mask in an error's message; strings under 4 characters are left (masking them garbles the message)."""
    if isinstance(value, str):
        if len(value) >= 4:
            yield value
    elif depth > 6 or isinstance(value, bytes | bytearray | int | float | bool) or value is None:
        return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _strings(item, depth + 1)
    elif isinstance(value, type):
        return
    elif dataclasses.is_dataclass(value):  # a QueueItem, holding its message
        yield from _strings({f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}, depth + 1)
    elif isinstance(value, Message):
        yield from _strings({field: getattr(value, field, None) for field in Message.FIELDS}, depth + 1)
    elif hasattr(type(value), "model_fields"):  # a pydantic model (instruct_content); not connections or embedders
        yield from _strings(vars(value), depth + 1)
