"""One statement and the namespace setting that scopes it, in one round trip, driven through libpq directly.

Every statement pgmem runs for a client runs in a transaction that set ``pgmem.namespace`` first
(:mod:`pgmem._async.scope`): the setting and the statement go to the server together, as a pipeline with one
Sync, so one implicit transaction holds both. Through psycopg's ``Connection.pipeline()`` that costs the
client about 65 µs of CPU per call on top of the statement's own ~120 µs (a pipeline object, a cursor per
statement, a poll per ``execute``, the results matched back to their cursors), which other processes
competing for the CPU turn into whole scheduler time slices (benchmarks/README.md, part N). This module
sends the same messages through the connection's libpq handle (``PQsendQueryParams`` /
``PQsendQueryPrepared`` in pipeline mode, one ``PQpipelineSync``) and reads the answer with one generator
that the connection's own ``wait`` drives (so the call's deadline and cancellation apply as to any
statement): a scoped statement then costs what a plain ``execute`` costs.

It is the sans-I/O half: :func:`send` queues the messages, :func:`exchange` is the generator, :func:`rows`
turns the answer into rows or raises the server's error as psycopg would. The flavours' ``scope.rows`` hold
the connection's lock, wait, and fall back to psycopg's own path wherever this one does not apply
(:func:`applies`).

Statements are prepared per connection the second time the same text with the same parameter types runs
(as psycopg does at its fifth), the setting's statement the first time (it goes with nearly every call),
under names of pgmem's own (``_pgmem_N``; psycopg's are ``_pg3_N``), at
most :data:`PREPARED_MAX` per connection: the least recently used one is deallocated, in the same round trip
but behind its own Sync, so that its failure could never roll back the statement.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import PQGen
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus, Format, PipelineStatus, TransactionStatus
from psycopg.waiting import Ready, Wait

__all__ = [
    "PREPARED_MAX",
    "Converted",
    "Plan",
    "applies",
    "convert",
    "exchange",
    "forget",
    "leave",
    "rows",
    "send",
    "setup_statement",
]

#: Statements prepared per connection, at most (psycopg's ``prepared_max`` is 100).
PREPARED_MAX = 100


@functools.lru_cache(maxsize=16)
def setup_statement(namespace: bool, settings: int) -> bytes:
    """The statement that scopes a transaction: the namespace (``$1``) when ``namespace``, then ``settings``
    more (name, value) pairs, each local to the transaction (``set_config(name, value, true)``, what
    ``SET LOCAL`` does)."""
    calls = ["set_config('pgmem.namespace', $1, true)"] if namespace else []
    first = len(calls) + 1
    calls += [f"set_config(${first + 2 * i}, ${first + 2 * i + 1}, true)" for i in range(settings)]
    return ("SELECT " + ", ".join(calls)).encode()


# psycopg's placeholders: %(name)s (automatic format), %(name)b (binary), %(name)t (text), and %% for a
# literal %. Anything else (positional %s among them) is left to psycopg.
_PLACEHOLDER = re.compile(r"%(?:\(([^)]+)\)([sbt])|(%)|(.|$))", re.DOTALL)
_FORMATS = {"s": PyFormat.AUTO, "b": PyFormat.BINARY, "t": PyFormat.TEXT}

_TUPLES_OK = ExecStatus.TUPLES_OK
_FATAL_ERROR = ExecStatus.FATAL_ERROR
_PIPELINE_SYNC = ExecStatus.PIPELINE_SYNC
_PIPELINE_ABORTED = ExecStatus.PIPELINE_ABORTED
_COMMAND_OK = ExecStatus.COMMAND_OK
_WAIT_R = Wait.R
_WAIT_RW = Wait.RW
_READY_R = Ready.R
#: SQLSTATE of a prepared statement the server does not know (dropped by DISCARD ALL / DEALLOCATE ALL).
_UNKNOWN_STATEMENT = "26000"


@dataclass(frozen=True, slots=True)
class Converted:
    """A statement in libpq's form: ``$n`` placeholders, and the parameter names and formats in order."""

    text: bytes
    names: tuple[str, ...]
    formats: tuple[PyFormat, ...]


@functools.lru_cache(maxsize=1024)
def convert(query: str | bytes) -> Converted | None:
    """``query`` with psycopg's named placeholders (``%(name)s``) as ``$1, $2…`` (a name used twice is one
    parameter, as psycopg does), or None when it has any other placeholder (then psycopg runs it)."""
    if isinstance(query, bytes):
        query = query.decode("utf-8")
    names: list[str] = []
    formats: list[PyFormat] = []
    index: dict[str, int] = {}
    failed = False

    def replace(match: re.Match[str]) -> str:
        nonlocal failed
        name, fmt, percent, other = match.groups()
        if percent:
            return "%"
        if name is None or other is not None:
            failed = True
            return ""
        if name not in index:
            index[name] = len(names) + 1
            names.append(name)
            formats.append(_FORMATS[fmt])
        elif formats[index[name] - 1] != _FORMATS[fmt]:
            failed = True
        return f"${index[name]}"

    text = _PLACEHOLDER.sub(replace, query)
    if failed:
        return None
    return Converted(text.encode("utf-8"), tuple(names), tuple(formats))


@dataclass(slots=True)
class _Prepared:
    """The statements pgmem prepared on one connection: ``(text, types) -> name``, most recent last, and how
    often each unprepared one ran."""

    names: OrderedDict[tuple[bytes, tuple[int, ...]], bytes] = field(default_factory=OrderedDict)
    seen: dict[tuple[bytes, tuple[int, ...]], int] = field(default_factory=dict)
    counter: int = 0


_prepared: weakref.WeakKeyDictionary[Any, _Prepared] = weakref.WeakKeyDictionary()


def forget(conn: Any) -> None:
    """Forget what pgmem prepared on ``conn`` (the server dropped it: DISCARD ALL, a new session)."""
    _prepared.pop(conn, None)


def applies(conn: Any) -> bool:
    """Whether a statement on ``conn`` may go this way: an open connection in autocommit (the pipeline's
    Sync ends the implicit transaction) or inside a transaction block (which the Sync leaves open), not in a
    pipeline of its caller's. A connection outside autocommit and outside a transaction is left to psycopg,
    which starts the caller's transaction first."""
    pgconn = conn.pgconn
    if conn.closed or pgconn.pipeline_status != PipelineStatus.OFF:
        return False
    status = pgconn.transaction_status
    return bool(status == TransactionStatus.INTRANS or (status == TransactionStatus.IDLE and conn.autocommit))


@dataclass(slots=True)
class Plan:
    """What :func:`send` queued: the transformer that dumped the parameters (it loads the rows), how many
    Syncs end the exchange, the prepared statements this call creates (kept only if the server took them),
    whether it ran one prepared before (which a server that forgot it fails) and whether a COMMIT follows."""

    tx: Any  # psycopg.adapt.Transformer (the C one when psycopg-binary is installed)
    syncs: int
    creates: tuple[tuple[tuple[bytes, tuple[int, ...]], bytes, int], ...]  # key, name, its result's position
    prepared: bool
    commit: bool = False  # a COMMIT follows the statement (its result is the last)


def _name(pgconn: Any, prepared: _Prepared, key: tuple[bytes, tuple[int, ...]]) -> tuple[bytes, bool, int]:
    """The name ``key`` is prepared under on the connection, whether it is to be created now, and how many
    Syncs a deallocation to make room added (sent at once: call before anything else is queued)."""
    name = prepared.names.get(key)
    if name is not None:
        prepared.names.move_to_end(key)
        return name, False, 0
    syncs = 0
    if len(prepared.names) >= PREPARED_MAX:
        _, old = prepared.names.popitem(last=False)
        pgconn.send_query_params(b"DEALLOCATE " + old, None)
        pgconn.pipeline_sync()  # its own implicit transaction: it can fail alone
        syncs = 1
    prepared.counter += 1
    return b"_pgmem_%d" % prepared.counter, True, syncs


def send(
    conn: Any,
    converted: Converted,
    params: Mapping[str, Any],
    namespace: str | None,
    prepare: bool | None,
    settings: Mapping[str, str] | None = None,
    *,
    commit: bool = False,
) -> Plan:
    """Queue (in pipeline mode) the namespace setting (unless ``namespace`` is None) with ``settings`` (local
    to the transaction, in the same statement), the statement, with ``commit`` a ``COMMIT`` (of the
    transaction block the connection is in: the statement's lock is never held across a round trip), and a
    Sync on ``conn``'s libpq handle. ``prepare``: True to prepare the statement now, False never, None from
    its second run. Call with the connection's lock held; :func:`exchange` then sends and reads."""
    tx = Transformer(conn)
    try:
        values = [params[name] for name in converted.names]
    except KeyError as exc:
        raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None
    dumped = tx.dump_sequence(values, converted.formats)
    types = tuple(tx.types or ())
    pgconn = conn.pgconn
    prepared = _prepared.get(conn)
    if prepared is None:
        prepared = _prepared[conn] = _Prepared()
    key = (converted.text, types)
    creates: list[tuple[tuple[bytes, tuple[int, ...]], bytes, int]] = []
    syncs = 1
    pgconn.enter_pipeline_mode()
    try:
        # The setup runs with every call that sets the namespace: prepared at once (its parse and plan were
        # 20-30 us of the server's time per call).
        setup: tuple[bytes, bool] | None = None
        if namespace is not None or settings:
            setup_key = (setup_statement(namespace is not None, len(settings or ())), ())
            setup_name, create, extra = _name(pgconn, prepared, setup_key)
            setup, syncs = (setup_name, create), syncs + extra
            if create:
                creates.append((setup_key, setup_name, 0))
        name: bytes | None = None
        create = False
        if key in prepared.names or prepare or (prepare is None and prepared.seen.get(key, 0) >= 1):
            prepared.seen.pop(key, None)
            name, create, extra = _name(pgconn, prepared, key)
            syncs += extra
            if create:  # after the setup's results (its preparation's, when created, and its run's)
                creates.append((key, name, 0 if setup is None else 1 + setup[1]))
        elif prepare is None:
            if len(prepared.seen) >= 4 * PREPARED_MAX:
                prepared.seen.clear()
            prepared.seen[key] = prepared.seen.get(key, 0) + 1
        if setup is not None:
            values = [] if namespace is None else [namespace]
            for setting, value in (settings or {}).items():
                values += [setting, value]
            setup_name, setup_create = setup
            if setup_create:
                pgconn.send_prepare(setup_name, setup_key[0], None)
            pgconn.send_query_prepared(setup_name, [v.encode("utf-8") for v in values], None, Format.TEXT)
        if name is not None:
            if create:
                pgconn.send_prepare(name, converted.text, types)
            pgconn.send_query_prepared(name, dumped, tx.formats, Format.BINARY)
        else:
            pgconn.send_query_params(converted.text, dumped, types, tx.formats, Format.BINARY)
        if commit:
            pgconn.send_query_params(b"COMMIT", None)
        pgconn.pipeline_sync()
    except BaseException:
        leave(pgconn)
        raise
    reused = (setup is not None and not setup[1]) or (name is not None and not create)
    return Plan(tx, syncs, tuple(creates), reused, commit)


def exchange(pgconn: Any, syncs: int) -> PQGen[list[Any]]:
    """Send what is queued and read the results up to the ``syncs``-th Sync: the results of the commands
    after the last but one Sync (the statement's, and the namespace setting's before them). Notifications
    that arrive meanwhile go to the connection's handler, as psycopg's own generators pass them. The caller
    leaves pipeline mode (:func:`leave`) however this ends."""
    while pgconn.flush() != 0:
        ready = yield _WAIT_RW
        if ready & _READY_R:
            pgconn.consume_input()
            _notifies(pgconn)
    segment: list[Any] = []
    while True:
        while pgconn.is_busy():
            yield _WAIT_R
            pgconn.consume_input()
            _notifies(pgconn)
        result = pgconn.get_result()
        if result is None:
            continue  # the end of one command's results
        if result.status == _PIPELINE_SYNC:
            syncs -= 1
            if syncs == 0:
                return segment
            segment = []  # a deallocation's segment: its outcome does not matter
        else:
            segment.append(result)


def rows(conn: Any, plan: Plan, results: list[Any]) -> list[tuple[Any, ...]]:
    """The statement's rows (none for a statement that returns none), or the first error among
    ``results`` (:func:`exchange`) raised as psycopg raises it; records the statement prepared when the
    server took it."""
    error = None
    last = None
    for at, result in enumerate(results):
        status = result.status
        if status == _FATAL_ERROR:
            if error is None:
                error = pg_errors.error_from_result(result, encoding=conn.info.encoding)
        elif status == _PIPELINE_ABORTED:
            if error is None:
                error = pg_errors.PipelineAborted("pipeline aborted")
        elif not (plan.commit and at == len(results) - 1):  # the COMMIT's own result has no rows
            last = result
    if plan.creates:
        prepared = _prepared.get(conn)
        if prepared is not None:
            for key, name, at in plan.creates:
                # a statement the server took stays prepared whatever the rest of the pipeline did
                if at < len(results) and results[at].status == _COMMAND_OK:
                    prepared.names[key] = name
    if error is not None:
        if error.sqlstate == _UNKNOWN_STATEMENT and plan.prepared:
            forget(conn)  # the server forgot them all (DISCARD ALL): prepare again from the next call
        raise error
    if last is None or last.status != _TUPLES_OK:
        return []
    tx = plan.tx
    tx.set_pgresult(last)
    loaded: list[tuple[Any, ...]] = tx.load_rows(0, last.ntuples, tuple)
    return loaded


def _notifies(pgconn: Any) -> None:
    while notify := pgconn.notifies():
        if pgconn.notify_handler:
            pgconn.notify_handler(notify)


def leave(pgconn: Any) -> None:
    """Leave pipeline mode when the connection can (it cannot once it is broken or closed)."""
    if pgconn.pipeline_status != PipelineStatus.OFF:
        try:
            pgconn.exit_pipeline_mode()
        except psycopg.Error:
            pass
