"""The cache's counters (:attr:`pgmem.cache.VectorCache.stats`), kept by every part of it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheStats"]


@dataclass
class CacheStats:
    """Counters since the cache was created."""

    hits: int = 0
    checks: int = 0  # strict mode: answered after one high-water-mark read found nothing new
    loads: int = 0
    catch_ups: int = 0
    evictions: int = 0
    bypassed: int = 0
    notifications: int = 0
    reconnects: int = 0
    silences: int = 0  # times the doorbell's beats stopped for doorbell.BEAT_TIMEOUT (entries then catch up)
    approximate_builds: int = 0
    approximate_failures: int = 0  # builds that raised: those memories are searched exactly (logged)
