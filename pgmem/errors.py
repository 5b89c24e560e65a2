"""The exception tree of pgmem.

Every error pgmem raises on purpose derives from :class:`PgmemError`. Driver errors are translated in one
place (:func:`translate`), always chained with ``raise ... from exc`` so the original cause stays visible.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
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
    "SchemaTooNew",
    "SummaryError",
    "Timeout",
    "check_conninfo",
    "redact",
    "secrets_in",
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


class SchemaTooNew(SchemaOutOfDate):
    """The database was migrated by a newer pgmem, to a revision this one does not know: upgrade pgmem in
    this process (``pgmem migrate`` cannot go back). The message names both revisions."""


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


# A secret after its key, in any form pgmem may print: libpq's key=value (quoted values may hold spaces and
# escaped quotes; an unterminated quote runs to the end), a URL's query (?password=…&), a dict's repr or
# JSON ('password': '…'), environment variables (PGPASSWORD=…, OPENAI_API_KEY=…).
_KEYED_SECRET_RE = re.compile(
    r"""(\b(?:[A-Za-z_]*password|passwd|[A-Za-z_]*api[_-]?key|[A-Za-z_]*secret|access[_-]?token)\b['"]?\s*[=:]\s*)"""
    r"""('(?:[^'\\]|\\.)*(?:'|$)|"(?:[^"\\]|\\.)*(?:"|$)|[^\s&,;'"}]+)""",
    re.IGNORECASE,
)
# A URL's user:password@ (greedy up to the authority's last @: a password may hold an unescaped @).
_URL_SECRET_RE = re.compile(r"(://[^:/@\s?#]*:)([^\s/?#]+)(@)")
# API keys in the shape of OpenAI's (sk-…, sk-proj-…), wherever they appear.
_API_KEY_RE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")


def _quoted(value: str) -> str:
    return "'***'" if value[:1] == "'" else '"***"' if value[:1] == '"' else "***"


def secrets_in(text: str) -> list[str]:
    """The passwords and keys that :func:`redact` finds in ``text`` (a DSN), unquoted and percent-decoded
    too: so that an error message quoting one on its own (``invalid percent-encoded token: "S3cret%zz"``)
    can be cleaned of it."""
    from urllib.parse import unquote

    found = [m.group(2) for m in _URL_SECRET_RE.finditer(text)]
    found += [m.group(2).strip("'\"") for m in _KEYED_SECRET_RE.finditer(text)]
    found += [m.group(0) for m in _API_KEY_RE.finditer(text)]
    found += [unquote(s) for s in found]
    found += [s.replace("\\'", "'").replace("\\\\", "\\") for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without passwords or API keys: a DSN (URL or key=value, quoted or not), an environment or
    a dict that names them, an error message quoting one; and without each string of ``secrets`` (e.g.
    :func:`secrets_in` of the DSN the message is about)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _URL_SECRET_RE.sub(lambda m: f"{m.group(1)}***{m.group(3)}", text)
    text = _KEYED_SECRET_RE.sub(lambda m: m.group(1) + _quoted(m.group(2)), text)
    return _API_KEY_RE.sub("sk-***", text)


def check_conninfo(dsn: str) -> str:
    """Return ``dsn`` if libpq can parse it, else raise :class:`InvalidInput` without the password.

    psycopg's own error (a ``ProgrammingError``) quotes the part it could not parse, which may be the
    password (``postgresql://alice:S3cret%zz@h/db``); it is dropped (``from None``), so no traceback
    carries it either."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = redact(str(exc).strip(), secrets_in(dsn))
        raise InvalidInput(f"invalid DSN {redact(dsn)!r}: {reason}") from None
    return dsn


def _described(exc: psycopg.Error) -> str:
    """The server's message of ``exc`` and its SQLSTATE (the driver's text when it has none)."""
    primary = exc.diag.message_primary if isinstance(exc, psycopg.DatabaseError) else None
    text = primary or str(exc).strip()
    return f"{text} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else text


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
    except (pg_errors.DataError, pg_errors.IntegrityError) as exc:
        # A value the database refused (out of range, a check or not-null constraint): the caller's input.
        raise InvalidInput(f"the database refused a value: {redact(_described(exc))}") from exc
    except psycopg.Error as exc:
        # Anything else the server or the driver raised (an error raised by a function or trigger, a
        # statement it cannot run): still one of pgmem's errors, its cause chained.
        raise PgmemError(f"the database refused the operation: {redact(_described(exc))}") from exc
