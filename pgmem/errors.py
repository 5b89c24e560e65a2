"""The exception tree of pgmem.

Every error pgmem raises on purpose derives from :class:`PgmemError`. Driver errors are translated in one
place (:func:`translate`), always chained with ``raise ... from exc`` so the original cause stays visible.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator

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
    "MissingExtra",
    "NotFound",
    "PermissionDenied",
    "PgmemError",
    "ResourceExhausted",
    "SchemaDrift",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "ServerError",
    "SummaryError",
    "Timeout",
    "check_conninfo",
    "connection_advice",
    "connection_failed",
    "missing_pgvector",
    "redact",
    "scrub",
    "secrets_in",
    "translate",
]


class PgmemError(Exception):
    """Base class of every error pgmem raises.

    Attributes:
        sqlstate: the SQLSTATE of the database error it was translated from (``"53100"``), None when it
            has none (pgmem's own checks, a driver error, a lost connection).
    """

    sqlstate: str | None = None


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


class SchemaDrift(SchemaOutOfDate):
    """The database's schema differs from what its revision declares: its stamp says a revision whose work
    is not all there (a database stamped while a migration was a placeholder, a hand-made change). Run
    ``pgmem migrate --repair`` as the tables' owner; it keeps the data.

    Attributes:
        differences: one line per difference, ``"category: subject: what differs"``
            (``"row-level security: pgmem.memories: row-level security not forced"``).
    """

    def __init__(self, message: str, differences: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.differences = tuple(differences)


class ConnectionFailed(PgmemError, ConnectionError):
    """The database could not be reached. The message names the host and the cause, never the password."""


class CommitUnknown(ConnectionFailed):
    """The connection was lost while a write was in flight: it may or may not have committed (all or
    nothing). pgmem does not retry such a write by itself; retry it only if doing it twice is harmless,
    or give it an idempotency key (``queues.push(..., idempotency_key=...)``), which pgmem retries."""


class Timeout(PgmemError, TimeoutError):
    """The operation did not finish within its timeout (``pgmem.connect(..., timeout=)``,
    ``client.with_timeout(...)``); its connection was closed and discarded. Also the server's own
    cancellation of a statement (SQLSTATE 57014: its ``statement_timeout``, ``pg_cancel_backend``): the
    statement wrote nothing and the connection is kept.

    Attributes:
        may_have_committed: True for a write whose statement may have reached the server: it committed
            entirely or not at all, never in part.
    """

    def __init__(self, message: str, *, may_have_committed: bool = False) -> None:
        super().__init__(message)
        self.may_have_committed = may_have_committed


class ServerError(PgmemError):
    """The server could not carry out the statement because of its own state, not because of the request
    or the connection: a fault of the server (SQLSTATE class 58: an I/O error, a missing file; class F0:
    its configuration) or an operator's intervention (57000). The failed statement wrote nothing (a
    transaction it was part of is rolled back) and the connection still works. pgmem does not retry it;
    running it again succeeds only once the server is fixed: alert an operator, retry with back-off."""


class ResourceExhausted(ServerError):
    """The server ran out of a resource (SQLSTATE class 53): disk full (53100, "could not extend file: No
    space left on device"), out of memory (53200), too many connections (53300), a configured limit
    (53400). The failed statement wrote nothing and the connection still works, but running it again at
    once fails the same way: free the resource first (or retry with back-off while an operator does).
    ``sqlstate`` tells which."""


class ClientClosed(PgmemError):
    """The client (or its pool) was closed and cannot be used any more."""


class EmbeddingError(PgmemError):
    """The embedding provider failed or answered with something unusable, or a memory's embedding model
    does not match the embedder given (a name registered with another dimension, another model)."""


class DimensionMismatch(EmbeddingError, InvalidInput):
    """A vector of yours has another dimension than its model's: a query vector (``vector=``) or one to
    store (``embedding=``). It does not fit the model (an :class:`EmbeddingError`) and is the caller's
    argument (an :class:`InvalidInput`, what a query vector of another dimension raised before); nothing
    was run or written."""


class SummaryError(PgmemError):
    """The LLM answered with something that cannot be stored as a summary (e.g. not a string)."""


class DemoIncomplete(PgmemError):
    """The demo team did not finish: a role process died or the deadline passed."""


class MissingExtra(PgmemError, ImportError):
    """An optional part of pgmem needs a package that is not installed; the message names the extra that
    installs it (e.g. ``pip install 'pgmem[report]'``). Nothing was run."""


# A secret after its key, in any form pgmem may print: libpq's key=value (quoted values may hold spaces and
# escaped quotes; an unterminated quote runs to the end), a URL's query (?password=…&), a dict's repr or
# JSON ('password': '…'), environment variables (PGPASSWORD=…, OPENAI_API_KEY=…).
_KEYED_SECRET_RE = re.compile(
    r"""(\b(?:[A-Za-z_]*password|passwd|[A-Za-z_]*api[_-]?key|[A-Za-z_]*secret|access[_-]?token)\b['"]?\s*[=:]\s*)"""
    r"""('(?:[^'\\]|\\.)*(?:'|$)|"(?:[^"\\]|\\.)*(?:"|$)|[^\s&,;'"}]+)""",
    re.IGNORECASE,
)
# A URL's user:password@ (greedy up to the authority's last @: a password may hold an unescaped @, and
# spaces, ? or # that libpq refuses or takes as they are; the authority ends at the first / or line end).
_URL_SECRET_RE = re.compile(r"(://[^:/@\s?#]*:)([^/\r\n]+)(@)")
# API keys in the shape of OpenAI's (sk-…, sk-proj-…), wherever they appear.
_API_KEY_RE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")
# An unquoted key=value password up to the next key= (a DSN libpq cannot parse: ``password=pa ss word``).
_UNQUOTED_PASSWORD_RE = re.compile(r"\b\w*password\s*=\s*([^'\"\s].*?)(?=\s+\w+\s*=|\s*$)", re.IGNORECASE)
# libpq's complaints about a conninfo string it cannot parse quote the part it choked on: a piece of the
# password, or the whole URL (``invalid percent-encoded token: "S3cret%zz"``, ``missing "=" after "ss"``).
_CONNINFO_ERROR_RE = re.compile(
    r"connection info string|\bURI\b|percent-encoded|unexpected spaces found|connection option", re.IGNORECASE
)
_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
# Keys of a parsed conninfo whose values are secret.
_SECRET_KEYS = ("password", "sslpassword")


def _quoted(value: str) -> str:
    return "'***'" if value[:1] == "'" else '"***"' if value[:1] == '"' else "***"


def _url_password(text: str) -> str | None:
    """The password of a URL DSN read as libpq's parser does (the user info is what precedes the last @
    before the first /), whether or not libpq accepts the rest: it may hold spaces or a bad escape."""
    start = text.find("://")
    if start < 0:
        return None
    authority = text[start + 3 :].split("/", 1)[0]
    userinfo, at, _ = authority.rpartition("@")
    if not at or ":" not in userinfo:
        return None
    return userinfo.split(":", 1)[1] or None


def secrets_in(text: str) -> list[str]:
    """The passwords and keys that :func:`redact` finds in ``text`` (a DSN), unquoted and percent-decoded
    too: so that an error message quoting one on its own (``invalid percent-encoded token: "S3cret%zz"``)
    can be cleaned of it. A DSN libpq can parse gives its password as libpq reads it (with
    ``conninfo_to_dict``); one it cannot is read as a URL's user info, or key=value up to the next key."""
    from urllib.parse import unquote

    found = [m.group(2) for m in _URL_SECRET_RE.finditer(text)]
    found += [m.group(2).strip("'\"") for m in _KEYED_SECRET_RE.finditer(text)]
    found += [m.group(0) for m in _API_KEY_RE.finditer(text)]
    found += [m.group(1) for m in _UNQUOTED_PASSWORD_RE.finditer(text)]
    url_password = _url_password(text)
    if url_password is not None:
        found.append(url_password)
    try:
        params = psycopg.conninfo.conninfo_to_dict(text)
    except psycopg.Error:
        pass
    else:
        found += [str(params[key]) for key in _SECRET_KEYS if params.get(key)]
    found += [unquote(s) for s in found]
    found += [s.replace("\\'", "'").replace("\\\\", "\\") for s in found]
    # A piece of a longer one (a pattern that stopped at a space) would only mangle the words around it.
    unique = sorted({s for s in found if s}, key=len, reverse=True)
    return [s for i, s in enumerate(unique) if not any(s in longer for longer in unique[:i])]


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


def _redact_driver_text(text: str, secrets: Iterable[str] = ()) -> str:
    """:func:`redact`, and, in libpq's complaint about a conninfo it could not parse, every quoted part
    (a piece of the password that no pattern can recognise)."""
    text = redact(text, secrets)
    if _CONNINFO_ERROR_RE.search(text):
        text = _QUOTED_RE.sub('"***"', text)
    return text


def _redact_for(exc: BaseException, text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` (of ``exc``) redacted; the driver's own messages (a psycopg error without a SQLSTATE: the
    server did not write it) as libpq's conninfo complaints too (:func:`_redact_driver_text`)."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate is None:
        return _redact_driver_text(text, secrets)
    return redact(text, secrets)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception chained to it (``__cause__`` and ``__context__``, suppressed or not),
    each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]


def scrub(exc: BaseException, secrets: Iterable[str] = ()) -> BaseException:
    """Redact ``exc`` and every exception chained to it, in place, and return ``exc``: their arguments
    (what ``str()``, ``repr()`` and a traceback show) go through :func:`redact` (with ``secrets``, e.g.
    :func:`secrets_in` of the DSN they are about), and a driver's complaint about a conninfo it could not
    parse loses its quoted parts. The exceptions stay chained and typed, so a traceback still shows where
    and why; only the secret is gone."""
    secrets = list(secrets)
    for current in _chain(exc):
        args = tuple(_redact_for(current, a, secrets) if isinstance(a, str) else a for a in current.args)
        if args != current.args:
            current.args = args
        notes = getattr(current, "__notes__", None)
        if isinstance(notes, list):
            current.__notes__ = [_redact_for(current, n, secrets) if isinstance(n, str) else n for n in notes]
    return exc


def check_conninfo(dsn: str) -> str:
    """Return ``dsn`` if libpq can parse it, else raise :class:`InvalidInput` without the password.

    psycopg's own error (a ``ProgrammingError``) quotes the part it could not parse, which may be the
    password (``postgresql://alice:S3cret%zz@h/db``, ``password=pa ss word``); it is neither chained nor
    left as the context, so no traceback carries it either: the message keeps libpq's reason."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason: str | None = _redact_driver_text(str(exc).strip(), secrets_in(dsn))
    else:
        return dsn
    # Raised outside the except block: the psycopg error is not even kept as __context__.
    raise InvalidInput(f"invalid DSN {redact(dsn, secrets_in(dsn))!r}: {reason}") from None


def _described(exc: psycopg.Error) -> str:
    """The server's message of ``exc``, its SQLSTATE and its HINT (the driver's text when it has none).

    The HINT is often the advice itself ("The extension must first be installed on the system where
    PostgreSQL is running.", "Check free disk space."): it was dropped with the rest of ``str(exc)``. The
    server writes it, not the caller; it is redacted with the message all the same."""
    primary = exc.diag.message_primary if isinstance(exc, psycopg.DatabaseError) else None
    text = primary or str(exc).strip()
    if not exc.sqlstate:
        return text
    hint = exc.diag.message_hint if primary else None  # str(exc) already holds it
    return (
        f"{text} (SQLSTATE {exc.sqlstate}; the server's hint: {hint})" if hint else f"{text} (SQLSTATE {exc.sqlstate})"
    )


#: The server's messages refusing to create pgvector because it is not installed (:func:`missing_pgvector`).
_NO_VECTOR_RE = re.compile(r'extension "vector" is not available|[/\\]vector\.control"')


def missing_pgvector(exc: psycopg.Error, major: int | None = None) -> ServerError | None:
    """pgmem's error for the server's refusal to create pgvector because it is not installed there, saying
    what to do for PostgreSQL ``major`` (its package's name; None: unknown); None for any other error.

    ``CREATE EXTENSION vector`` where pgvector is not installed fails with feature_not_supported and
    'extension "vector" is not available' (PostgreSQL 16 and later; before, undefined_file and 'could not
    open extension control file ".../vector.control"'), and the server's HINT, which the message keeps."""
    primary = exc.diag.message_primary if isinstance(exc, psycopg.DatabaseError) else None
    if exc.sqlstate not in ("0A000", "58P01") or not (primary and _NO_VECTOR_RE.search(primary)):
        return None
    where = f"PostgreSQL {major}" if major else "the server's PostgreSQL major version (SHOW server_version)"
    nn = major or "NN"
    return ServerError(
        f"pgvector is not installed on the server: {_redact_for(exc, _described(exc))}. pgmem needs it: install "
        f"pgvector for {where} (Debian/Ubuntu: the postgresql-{nn}-pgvector package from apt.postgresql.org; "
        f"RHEL/Fedora: pgvector_{nn}; or build it from https://github.com/pgvector/pgvector#installation), or "
        "ask your DBA to install it and run CREATE EXTENSION vector in this database; or leave PGMEM_DSN unset "
        "to use pgmem's embedded server, which has pgvector"
    )


def _connect_timeout(conninfo: str) -> float | None:
    """The ``connect_timeout`` connecting to ``conninfo`` waited: the DSN's, else ``PGCONNECT_TIMEOUT``'s."""
    try:
        value = psycopg.conninfo.conninfo_to_dict(conninfo).get("connect_timeout")
    except psycopg.Error:
        value = None
    text = str(value or os.environ.get("PGCONNECT_TIMEOUT") or "").strip()
    return float(text) if text.isdigit() and int(text) > 0 else None


def connection_advice(reason: str, conninfo: str | None = None) -> str:
    """What to check when connecting to ``conninfo`` failed for ``reason`` (libpq's or psycopg's message)."""
    text = reason.lower()
    if "timeout expired" in text:
        seconds = _connect_timeout(conninfo) if conninfo else None
        waited = f" within {seconds:g} s" if seconds else ""
        return (
            f"nothing answered{waited}: is a PostgreSQL server listening there? check the DSN's host and port "
            "(a firewall that drops packets, or another service on that port, looks the same); a slow network "
            "may need a longer connect_timeout in the DSN"
        )
    if "connection refused" in text:
        return "nothing listens there: start the server, or check the DSN's host and port"
    if "could not translate host name" in text or "name or service not known" in text:
        return "the host name does not resolve: check the DSN's host"
    if "password authentication failed" in text or "no password supplied" in text:
        return "check the DSN's user and password (or PGPASSWORD, ~/.pgpass)"
    if "does not exist" in text:
        return "check the DSN's user and database (dbname)"
    if "no pg_hba.conf entry" in text:
        return "the server does not accept this client: ask its administrator to allow it in pg_hba.conf"
    return "check the DSN and that the server is running"


def connection_failed(conninfo: str, exc: BaseException) -> ConnectionFailed:
    """pgmem's error for a failed attempt to connect to ``conninfo``: the host and port, the cause and what
    to check (:func:`connection_advice`), never the password. Raise it ``from None``: the driver's error
    quotes the DSN it was given."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        params = {}
    where = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = params.get("port")
    # One line (libpq's own advice follows a newline and a tab), for a log line or the CLI's.
    reason = " ".join(_redact_driver_text(str(exc), secrets_in(conninfo)).split()) or type(exc).__name__
    error = ConnectionFailed(
        f"cannot connect to PostgreSQL at {where}{':' + str(port) if port else ''}: {reason}; "
        f"{connection_advice(reason, conninfo)}"
    )
    error.sqlstate = getattr(exc, "sqlstate", None)
    return error


#: SQLSTATEs of a session the server ended (besides class 08 and any FATAL error): admin_shutdown
#: (pg_terminate_backend, a fast shutdown), crash_shutdown, cannot_connect_now (starting or in recovery),
#: database_dropped, idle_session_timeout, idle_in_transaction_session_timeout, transaction_timeout.
_SESSION_ENDED = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "25P03", "25P04"})

#: Lost a race for a lock: lock_not_available (lock_timeout, NOWAIT), object_in_use.
_CONTENDED = frozenset({"55P03", "55006"})


def _session_ended(exc: psycopg.Error) -> bool:
    """Whether ``exc`` means the connection is gone: the driver's own connection error (no SQLSTATE),
    class 08, a SQLSTATE of :data:`_SESSION_ENDED`, or any error the server reported as FATAL or PANIC."""
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    if state.startswith("08") or state in _SESSION_ENDED:
        return True
    severity = exc.diag.severity_nonlocalized if isinstance(exc, psycopg.DatabaseError) else None
    return severity in ("FATAL", "PANIC")


def _translated(exc: psycopg.Error) -> PgmemError:
    """pgmem's error for the driver error ``exc`` (docs/reliability.md has the table)."""
    state = exc.sqlstate or ""
    described = _redact_for(exc, _described(exc))
    if isinstance(exc, psycopg_pool.PoolClosed):
        return ClientClosed(f"the client is closed: {_redact_for(exc, str(exc))}")
    if isinstance(exc, pg_errors.UndefinedTable):
        return SchemaOutOfDate(
            f"pgmem's tables are missing ({exc.diag.message_primary}); run `pgmem migrate` or connect with migrate=True"
        )
    if isinstance(exc, pg_errors.CharacterNotInRepertoire | pg_errors.UntranslatableCharacter):
        return InvalidInput(f"text the database cannot store: {exc.diag.message_primary}")
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        # A row names one that does not exist (e.g. a file of a store nobody registered).
        return NotFound(exc.diag.message_detail or described)
    if isinstance(exc, pg_errors.UniqueViolation):
        return Conflict(exc.diag.message_detail or described)
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        if 'extension "vector"' in (exc.diag.message_primary or ""):
            # pgvector is not a trusted extension: only a superuser may create it.
            return PermissionDenied(
                f"{described}: ask your DBA to run CREATE EXTENSION vector in this database (as a superuser), then "
                "migrate again; or leave PGMEM_DSN unset to use pgmem's embedded server"
            )
        # e.g. "new row violates row-level security policy": a write outside the transaction's namespace.
        return PermissionDenied(exc.diag.message_primary or described)
    if (no_vector := missing_pgvector(exc)) is not None:
        return no_vector
    if _session_ended(exc):
        # The connection is gone (resilience.connection_lost decides whether the call is run again).
        message = _redact_for(exc, str(exc))
        if exc.sqlstate is None and "timeout expired" in message:  # psycopg's, naming no host: say what it means
            message = f"{message}: {connection_advice(message)}"
        return ConnectionFailed(message)
    if state.startswith("40"):
        # SQLSTATE class 40 (deadlock, serialization failure) is an OperationalError in psycopg, but the
        # server is fine: the transaction lost a race with another one and can be retried.
        return Conflict(f"rolled back by a concurrent transaction ({exc.diag.message_primary}); retry the operation")
    if state in _CONTENDED:
        return Conflict(f"a lock was not available ({described}); retry the operation")
    if state.startswith("53"):
        return ResourceExhausted(
            f"the server ran out of a resource: {described}; the statement wrote nothing: free the resource "
            "(disk space, memory, connections), then retry"
        )
    if state.startswith("54"):
        return InvalidInput(f"value too large for the database: {described}")
    if state == "57014":
        return Timeout(f"the server canceled the statement: {described}; it wrote nothing")
    if state.startswith(("57", "58", "F0")):
        return ServerError(f"the server failed: {described}; the statement wrote nothing")
    if isinstance(exc, psycopg.InterfaceError):
        return ClientClosed(f"the connection is closed: {_redact_for(exc, str(exc))}")
    if state == "" and _CONNINFO_ERROR_RE.search(str(exc)):
        return InvalidInput(f"invalid DSN: {described}")
    if isinstance(exc, pg_errors.DataError | pg_errors.IntegrityError):
        # A value the database refused (out of range, a check or not-null constraint): the caller's input.
        return InvalidInput(f"the database refused a value: {described}")
    # Anything else the server or the driver raised (an error raised by a function or trigger, a statement
    # it cannot run): still one of pgmem's errors, its cause chained.
    return PgmemError(f"the database refused the operation: {described}")


class _Translating:
    # A class, not a generator: every statement enters one (about 1 us less).
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        # Returns None: the exception passes on (or its translation does), never swallowed.
        if isinstance(exc, PgmemError):
            scrub(exc)
        elif isinstance(exc, psycopg.Error):
            error = _translated(exc)
            error.sqlstate = exc.sqlstate
            raise error from scrub(exc)


_TRANSLATING = _Translating()


def translate() -> _Translating:
    """Translate driver errors raised inside the block into pgmem's exception tree (the table in
    docs/reliability.md), each chained to its cause (``raise ... from exc``) with the cause and whatever
    it chains redacted (:func:`scrub`): no password in any part of a traceback."""
    return _TRANSLATING
