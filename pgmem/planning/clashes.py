"""What the statements that store a message once (add, add_many, append, push, push_many, publish) report
when an id clashes, read back for the caller's error: shared by the message and queue repositories."""

from __future__ import annotations

from psycopg import errors as pg_errors

from pgmem.errors import Conflict

__all__ = ["APPEND_KEYS", "MAX_RACES", "listed_ids", "message_clash"]


def message_clash(exc: Conflict) -> str | None:
    """The detail of a unique violation on ``messages_pkey``: the statements that store a message once
    (add, add_many, push, push_many, publish) raise it on purpose when an id is stored with other content
    (or was stored concurrently); None for any other Conflict."""
    cause = exc.__cause__
    if isinstance(cause, pg_errors.UniqueViolation) and cause.diag.constraint_name == "messages_pkey":
        return cause.diag.message_detail or "an id is already stored"
    return None


#: How often add_many runs again after finding only ids other writers stored at the same moment (each run
#: sees those committed; batches of writers sharing many new ids can race again on others).
MAX_RACES = 10


#: The unique keys an append of a stored (or repeated) id violates: the message's, or its entry's when the
#: statement happens to insert the entry first.
APPEND_KEYS = frozenset({"messages_pkey", "memory_entries_pkey"})


def listed_ids(ids: list[str], shown: int = 10) -> str:
    """The first `shown` ids, and how many there are in all when that is more (an error message stays short)."""
    if not ids:
        return "unknown"
    head = ", ".join(ids[:shown])
    return head if len(ids) <= shown else f"{head} … ({len(ids)} in all)"
