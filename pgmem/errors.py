"""The exception tree of pgmem.

Every error pgmem raises on purpose derives from :class:`PgmemError`. Driver errors are translated in one
place (:func:`translate`), always chained with ``raise ... from exc`` so the original cause stays visible.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

__all__ = [
    "ClientClosed",
    "CommitUnknown",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "DemoIncomplete",
    "EmbeddingError",
    "InvalidInput",
    "LeaseLost",
    "NotFound",
    "PermissionDenied",
    "PgmemError",
    "SchemaOutOfDate",
    "SummaryError",
    "Timeout",
    "redact",
    "translate",
]


class PgmemError(Exception):
    """Base class of every error pgmem raises."""


class InvalidInput(PgmemError, ValueError):
    """The caller passed something pgmem refuses to store or use; nothing was written."""


class ConfigError(InvalidInput):
    """A memory configuration (ChatDev-style YAML) is invalid; the message says where (e.g.
    ``memory[1].config.top_k``)."""


class NotFound(PgmemError, LookupError):
    """The requested row does not exist."""


class Conflict(PgmemError):
    """The write conflicts with a row that already exists (e.g. same id, different content), or lost a race
    with a concurrent transaction (deadlock, serialization failure) and was rolled back: retry it."""


class LeaseLost(Conflict):
    """A queue item's lease expired and another claim took it (or it was already acknowledged)."""


class PermissionDenied(PgmemError, PermissionError):
    """The database role may not do this: a row of another namespace (row-level security), a
    cross-namespace operation by a role that does not own pgmem's tables, or a missing grant."""


class SchemaOutOfDate(PgmemError):
    """The database schema is missing or older than this version of pgmem; run ``pgmem migrate``."""


class ConnectionFailed(PgmemError, ConnectionError):
    """The database could not be reached. The message names the host and the cause, never the password."""


class CommitUnknown(ConnectionFailed):
    """The connection was lost while a write was in flight: it may or may not have committed (all or
    nothing). pgmem does not retry such a write by itself; retry it only if doing it twice is harmless,
    or give it an idempotency key (``queues.push(..., idempotency_key=...)``), which pgmem retries."""


class Timeout(PgmemError, TimeoutError):
    """The operation did not finish within its timeout (``pgmem.connect(..., timeout=)``,
    ``client.with_timeout(...)``); its connection was closed and discarded.

    Attributes:
        may_have_committed: True for a write whose statement may have reached the server: it committed
            entirely or not at all, never in part.
    """

    def __init__(self, message: str, *, may_have_committed: bool = False) -> None:
        super().__init__(message)
        self.may_have_committed = may_have_committed


class ClientClosed(PgmemError):
    """The client (or its pool) was closed and cannot be used any more."""


class EmbeddingError(PgmemError):
    """The embedding provider failed or answered with something unusable, or a memory's embedding model
    does not match the embedder given (a name registered with another dimension, another model)."""


class SummaryError(PgmemError):
    """The LLM answered with something that cannot be stored as a summary (e.g. not a string)."""


class DemoIncomplete(PgmemError):
    """The demo team did not finish: a role process died or the deadline passed."""


_PASSWORD_RE = re.compile(r"(password\s*=\s*)(\S+)|(://[^:/@\s]*:)([^@\s]+)(@)", re.IGNORECASE)


def redact(text: str) -> str:
    """Remove passwords from a DSN or an error message that quotes one."""

    def _sub(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(1) + "***"
        return f"{m.group(3)}***{m.group(5)}"

    return _PASSWORD_RE.sub(_sub, text)


@contextmanager
def translate() -> Iterator[None]:
    """Translate driver errors raised inside the block into pgmem's exception tree."""
    try:
        yield
    except PgmemError:
        raise
    except pg_errors.UndefinedTable as exc:
        raise SchemaOutOfDate(
            f"pgmem's tables are missing ({exc.diag.message_primary}); run `pgmem migrate` or connect with migrate=True"
        ) from exc
    except (pg_errors.CharacterNotInRepertoire, pg_errors.UntranslatableCharacter) as exc:
        raise InvalidInput(f"text the database cannot store: {exc.diag.message_primary}") from exc
    except pg_errors.ProgramLimitExceeded as exc:
        raise InvalidInput(f"value too large for the database: {exc.diag.message_primary}") from exc
    except pg_errors.ForeignKeyViolation as exc:
        # A row names one that does not exist (e.g. a file of a store nobody registered).
        raise NotFound(exc.diag.message_detail or str(exc)) from exc
    except pg_errors.UniqueViolation as exc:
        raise Conflict(exc.diag.message_detail or str(exc)) from exc
    except pg_errors.InsufficientPrivilege as exc:
        # e.g. "new row violates row-level security policy": a write outside the transaction's namespace.
        raise PermissionDenied(exc.diag.message_primary or str(exc)) from exc
    except psycopg_pool.PoolClosed as exc:
        raise ClientClosed(f"the client is closed: {exc}") from exc
    except psycopg.OperationalError as exc:
        if (exc.sqlstate or "").startswith("40"):
            # SQLSTATE class 40 (deadlock, serialization failure) is an OperationalError in psycopg, but
            # the server is fine: the transaction lost a race with another one and can be retried.
            raise Conflict(
                f"rolled back by a concurrent transaction ({exc.diag.message_primary}); retry the operation"
            ) from exc
        raise ConnectionFailed(redact(str(exc))) from exc
    except psycopg.InterfaceError as exc:
        raise ClientClosed(f"the connection is closed: {exc}") from exc
