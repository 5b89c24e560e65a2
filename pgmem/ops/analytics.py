"""What ``pgmem stats`` and ``pgmem report`` read: the queries of ``sql/analytics.sql`` over the views of
``sql/views.sql`` (documented in docs/analytics.md), for a scope (a namespace or all, a time window)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, LiteralString, NamedTuple

import psycopg

from pgmem.errors import InvalidInput, translate
from pgmem.planning import statements as queries

__all__ = ["BUCKETS", "Bucket", "Scope", "bucket_for", "fetch", "parse_since", "query_text"]

_SPAN_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


class Bucket(NamedTuple):
    """A bucket width of the activity chart: as a Postgres interval, and in seconds."""

    interval: str
    seconds: float


#: Bucket widths the activity chart picks from: the smallest that gives at most 60 buckets.
BUCKETS: tuple[Bucket, ...] = (
    Bucket("100 milliseconds", 0.1),
    Bucket("250 milliseconds", 0.25),
    Bucket("500 milliseconds", 0.5),
    Bucket("1 second", 1),
    Bucket("5 seconds", 5),
    Bucket("15 seconds", 15),
    Bucket("1 minute", 60),
    Bucket("5 minutes", 300),
    Bucket("15 minutes", 900),
    Bucket("1 hour", 3600),
    Bucket("6 hours", 21600),
    Bucket("1 day", 86400),
    Bucket("7 days", 604800),
    Bucket("30 days", 2592000),
)


def parse_since(text: str | None, *, now: datetime | None = None) -> datetime | None:
    """A time window's start: a span back from now (``90s``, ``15m``, ``2h``, ``7d``, ``1w``) or an ISO 8601
    time (UTC when it has no offset). ``None`` or an empty string: no window."""
    if text is None or not text.strip():
        return None
    match = _SPAN_RE.match(text)
    if match:
        span = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2).lower()])
        return (now or datetime.now(UTC)) - span
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"--since takes a span (90s, 15m, 2h, 7d, 1w) or an ISO 8601 time, got {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a report or ``stats`` covers: one namespace (None: all), messages since a time (None: all),
    and optionally the memory whose action flow is drawn (None: each namespace's largest)."""

    namespace: str | None = None
    since: datetime | None = None
    memory: str | None = None

    def params(self) -> dict[str, Any]:
        return {"ns": self.namespace, "since": self.since, "memory": self.memory}


def query_text(name: str) -> LiteralString:
    """The SQL of a named analytics query, comments included (the report prints it)."""
    return queries.load("analytics")[name]


#: Row-level security: the transaction sees the scope's namespace, or every namespace (no namespace) when
#: the connection's role is the tables' owner (its pgmem_admin policy; a superuser sees all anyway). pgmem's
#: application role sees nothing without a namespace.
_SCOPE_SQL = """
SELECT set_config('pgmem.namespace', coalesce(%(ns)s::text, ''), true),
       set_config('pgmem.admin', CASE WHEN %(ns)s::text IS NULL THEN 'on' ELSE '' END, true)"""


def scope_transaction(conn: psycopg.Connection[Any], scope: Scope) -> None:
    """Scope the transaction ``conn`` is in to ``scope``'s namespace (see :data:`_SCOPE_SQL`)."""
    conn.execute(_SCOPE_SQL, {"ns": scope.namespace})


def fetch(conn: psycopg.Connection[Any], name: str, scope: Scope, **extra: Any) -> list[dict[str, Any]]:
    """Rows of the named query as dicts (numbers as int or float). Outside a transaction it runs in one
    scoped to ``scope`` (:func:`scope_transaction`); inside one, the caller scopes it."""
    with translate():
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            with conn.transaction():
                scope_transaction(conn, scope)
                return fetch(conn, name, scope, **extra)
        cur = conn.execute(query_text(name), {**scope.params(), **extra})
        columns = [c.name for c in cur.description or []]
        return [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in cur.fetchall()]


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def bucket_for(first: datetime | None, last: datetime | None) -> str:
    """The activity chart's bucket width for messages between ``first`` and ``last``."""
    if first is None or last is None:
        return BUCKETS[0].interval
    span = (last - first).total_seconds()
    for bucket in BUCKETS:
        if span / bucket.seconds <= 60:
            return bucket.interval
    return BUCKETS[-1].interval
