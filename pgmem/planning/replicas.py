"""Read replicas, the flavour-free part: checking ``connect(replicas=...)`` and the counters a client keeps
(:mod:`pgmem._async.replicas` routes the reads)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import psycopg

from pgmem.errors import InvalidInput

__all__ = ["ReadStats", "ReplicaStats", "check_replicas", "describe"]


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """What one replica did for a client (``client.replica_stats()``), counted since the client opened.

    Attributes:
        replica: where it is (``host:port``; never the password).
        state: ``up``, ``down`` (unreachable or broke: skipped for a back-off) or ``lagging`` (did not catch
            up with the client's writes within ``replica_wait``: skipped for as long).
        reads: reads it served.
        waited: of those, reads that first waited for it to replay the client's writes.
        skipped_down: reads that went elsewhere because it was down (the read that found it down included).
        skipped_lag: reads that went elsewhere because it lagged (the read that waited for it included).
        errors: reads it refused (an error from the database) that ran again on the primary.
    """

    replica: str
    state: str
    reads: int
    waited: int
    skipped_down: int
    skipped_lag: int
    errors: int


@dataclass(frozen=True, slots=True)
class ReadStats:
    """The routed reads of a client (``client.replica_stats()``).

    Attributes:
        replicas: one entry per replica, in the order given.
        primary: routed reads the primary served (every replica down, lagging or refusing).
        position_checks: round trips to the primary for its WAL position (one per read that followed a write).
    """

    replicas: tuple[ReplicaStats, ...]
    primary: int
    position_checks: int

    @property
    def off_primary(self) -> float:
        """The share of routed reads the replicas served (0.0 with no reads)."""
        served = sum(r.reads for r in self.replicas)
        total = served + self.primary
        return served / total if total else 0.0


def check_replicas(conninfos: Any, wait: Any) -> tuple[list[str], float]:
    """The replica DSNs and wait of ``connect(replicas=, replica_wait=)``, checked: a list of DSN strings
    (libpq must parse each) and a finite number of seconds >= 0. Raises :class:`InvalidInput` (nothing is
    opened)."""
    if isinstance(conninfos, str) or not isinstance(conninfos, list | tuple):
        raise InvalidInput("replicas must be a list of DSN strings")
    for conninfo in conninfos:
        if not isinstance(conninfo, str) or not conninfo.strip():
            raise InvalidInput("replicas must be a list of non-empty DSN strings")
        try:
            psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError:
            parses = False  # raised below, outside the handler: psycopg's error quotes the password
        else:
            parses = True
        if not parses:
            raise InvalidInput(f"replica DSN #{conninfos.index(conninfo) + 1} does not parse") from None
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not math.isfinite(wait) or wait < 0:
        raise InvalidInput(f"replica_wait must be a finite number of seconds >= 0, got {wait!r}")
    return list(conninfos), float(wait)


def describe(conninfo: str) -> str:
    """``host:port`` of a DSN, for messages and stats: never its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(an unparsable DSN)"
    host = str(params.get("host") or "localhost")
    port = params.get("port")
    return f"{host}:{port}" if port else host
