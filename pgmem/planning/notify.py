"""What a NOTIFY payload says of a queue or memory: a tag only the namespace's own clients can compute.

Notifications go to every connection that listens on the channel, whoever its tenant. A payload names a
queue or memory by ``tag(key, name)``, the first 32 hex digits of ``sha256(key || name)``, with the
namespace's random key (``pgmem.namespace_keys``, readable by that namespace only under row-level
security; ``pgmem.notify_key`` makes it on first use). The database computes the same in
``pgmem.notify_tag`` (sql/triggers.sql) when it notifies.
"""

from __future__ import annotations

import hashlib

__all__ = ["TAG_LENGTH", "tag"]

#: Hex digits of a tag (128 bits: two names of a namespace never share one in practice).
TAG_LENGTH = 32


def tag(key: str, name: str) -> str:
    """The tag of queue or memory ``name`` under the namespace's notification ``key`` (its text form)."""
    return hashlib.sha256((key + name).encode()).hexdigest()[:TAG_LENGTH]
