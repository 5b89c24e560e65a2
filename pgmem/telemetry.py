"""OpenTelemetry for pgmem (``pip install 'pgmem[otel]'``): spans of the repository calls, and metrics of
the queues and the embedding backlog.

Spans need nothing from you but a tracer provider (:mod:`pgmem.tracing` has the details): each public
repository call of a client, sync or async, is a span with the database semantic conventions' attributes.

Metrics are asked for, per client: :func:`observe` registers, on a meter (the global meter provider's,
or ``meter_provider``'s), observable up-down counters read at each collection by one statement
(``sql/telemetry.sql``), never per call:

=============================  ==========  ============================================================
instrument                     unit        what (attributes)
=============================  ==========  ============================================================
``pgmem.queue.depth``          ``{item}``  items not yet acknowledged, leased ones included (namespace,
                                           queue)
``pgmem.queue.claimed``        ``{item}``  items under a lease now: claimed, not yet acked or nacked
``pgmem.queue.dead_letters``   ``{item}``  dead letters waiting for a requeue or a purge
``pgmem.embedding.backlog``    ``{message}`` messages queued to be embedded (namespace, model)
=============================  ==========  ============================================================

Why read the database rather than count calls: depth, claims and backlog are the sum of every process's
work (and of leases running out, triggers, other clients); counters in this process would see its own
calls only, and would be wrong after a restart. One grouped statement per collection (a pass over the
namespace's queue items and outbox) costs the same whether the queues saw ten calls or a million.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from pgmem.errors import ClientClosed, ConfigError, InvalidInput
from pgmem.planning import statements

if TYPE_CHECKING:
    from pgmem._sync.client import Client

__all__ = ["Observation", "observe"]

Q = statements.load("telemetry")


class _GaugeRow(NamedTuple):
    """``gauges``: a queue's counts (kind ``queue``) or a model's backlog (kind ``model``, in ``depth``)."""

    kind: str
    name: str
    depth: int
    claimed: int
    dead: int


class Observation:
    """The metrics of one client that :func:`observe` reports; :meth:`close` stops them."""

    def __init__(self, client: Client, observer: _Observer) -> None:
        self._client: Client | None = client
        self._observer = observer
        self._rows: list[_GaugeRow] = []

    def close(self) -> None:
        """Stop reporting this client (it may be closed afterwards). Idempotent."""
        self._client = None
        self._observer.remove(self)

    def _read(self) -> None:
        client = self._client
        if client is None:
            self._rows = []
            return
        try:
            rows = client.executor.rows(Q["gauges"], {"ns": client.namespace})
        except ClientClosed:
            self.close()  # closed under us: nothing more to report
            self._rows = []
            return
        self._rows = [
            _GaugeRow(str(k), str(name), int(depth), int(claimed), int(dead)) for k, name, depth, claimed, dead in rows
        ]

    def _measured(self, field: str, kind: str) -> Iterator[Any]:
        from opentelemetry.metrics import Observation as Measured

        client = self._client
        if client is None:
            return
        label = "pgmem.queue" if kind == "queue" else "pgmem.model"
        for row in self._rows:
            if row.kind == kind:
                yield Measured(getattr(row, field), {"pgmem.namespace": client.namespace, label: row.name})


class _Observer:
    """The four instruments of one meter provider, reporting every client observed on it (OpenTelemetry
    keeps the first instrument of a name: a second client registering its own would never be called)."""

    def __init__(self, meter: Any) -> None:
        self._lock = threading.Lock()
        self._observed: list[Observation] = []
        meter.create_observable_up_down_counter(
            "pgmem.queue.depth",
            [self._reported("depth", "queue", read=True)],
            unit="{item}",
            description="Queue items not yet acknowledged, leased ones included",
        )
        meter.create_observable_up_down_counter(
            "pgmem.queue.claimed",
            [self._reported("claimed", "queue")],
            unit="{item}",
            description="Queue items under a lease",
        )
        meter.create_observable_up_down_counter(
            "pgmem.queue.dead_letters", [self._reported("dead", "queue")], unit="{item}", description="Dead letters"
        )
        meter.create_observable_up_down_counter(
            "pgmem.embedding.backlog",
            [self._reported("depth", "model")],
            unit="{message}",
            description="Messages queued to be embedded",
        )

    def add(self, observation: Observation) -> None:
        with self._lock:
            self._observed.append(observation)

    def remove(self, observation: Observation) -> None:
        with self._lock:
            if observation in self._observed:
                self._observed.remove(observation)

    def _reported(self, field: str, kind: str, read: bool = False) -> Callable[[Any], Iterator[Any]]:
        def callback(options: Any) -> Iterator[Any]:
            with self._lock:
                observed = list(self._observed)
            for observation in observed:
                if read:
                    # The SDK calls one collection's callbacks in the order their instruments were created:
                    # the first reads (one statement per client), the others report the rows it read.
                    observation._read()
                yield from observation._measured(field, kind)

        return callback


#: The observer of each meter provider asked for so far.
_observers: weakref.WeakKeyDictionary[Any, _Observer] = weakref.WeakKeyDictionary()
_observers_lock = threading.Lock()


def observe(client: Client, *, meter_provider: Any = None) -> Observation:
    """Report ``client``'s queues (depth, claimed, dead letters) and embedding backlog as OpenTelemetry
    metrics of its namespace, read by one statement each time the metrics are collected. Observe as many
    clients (namespaces) as you like, each once.

    ``client`` is a sync :class:`pgmem.Client`: the SDK collects in its exporter's thread, outside any
    event loop. An asyncio application observes through a small sync client of its own:
    ``observe(pgmem.connect(dsn, namespace=..., max_size=1))``.

    Example:
        >>> from opentelemetry.sdk.metrics import MeterProvider
        >>> observation = pgmem.telemetry.observe(client, meter_provider=MeterProvider(metric_readers=[reader]))
        >>> observation.close()  # when the client is no longer observed

    Raises:
        ConfigError: OpenTelemetry's API is not installed (``pip install 'pgmem[otel]'``).
        InvalidInput: ``client`` is an :class:`pgmem.AsyncClient`.
    """
    try:
        from opentelemetry import metrics
    except ImportError:
        raise ConfigError("pgmem.telemetry needs OpenTelemetry: pip install 'pgmem[otel]'") from None
    if inspect.iscoroutinefunction(client.executor.rows):
        raise InvalidInput(
            "metrics are collected in the exporter's thread, outside your event loop: observe a sync client, "
            "e.g. pgmem.telemetry.observe(pgmem.connect(dsn, namespace=..., max_size=1))"
        )
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    with _observers_lock:
        observer = _observers.get(provider)
        if observer is None:
            observer = _observers[provider] = _Observer(provider.get_meter("pgmem"))
    observation = Observation(client, observer)
    observer.add(observation)
    return observation
