"""Worker processes of the chaos soak (``tests/faults/test_chaos_soak.py``), run as
``python -m tests.faults.soak_workers ROLE NAME RUN_DIR VIA``.

Each worker works in namespace :data:`NAMESPACE` through an ordinary ``pgmem.connect`` as the embedded
server's application role: ``VIA`` ``proxy`` connects to the DSN in ``SOAK_DSN`` (the test's stalling
proxy), ``direct`` to the embedded server under ``PGMEM_HOME`` (such a client starts the server again when
it dies: the soak's server comes back only through them). Its backends carry ``PGAPPNAME`` (``soak-NAME``),
which is how the controller finds them to terminate.

Every call is retried the way docs/reliability.md tells users to: writes that may have committed are sent
again only where that is harmless (a keyed push, a publish or an add of the same message id, an item put),
an add that may have committed is first looked up. A call counts as done only once it returned, and is
then written to the worker's journal (``RUN_DIR/NAME.journal``, one ``KIND id`` a line). Every exception is
counted by type; one that is not a :class:`pgmem.errors.PgmemError` is *untyped* (the soak's target is
none). The consumers' own statements (the effect's ``INSERT``; ``consumer``'s commit of its own connection)
raise the driver's errors, counted apart (``own:``).

Roles:

- ``publisher``: ``queues.publish`` to memory :data:`ENV` (delivered to :data:`INBOX`) and
  ``queues.push`` with an idempotency key to :data:`QUEUE`, in turn.
- ``consumer``, ``tx-consumer``: claims from both queues; per item, its effect (a row of
  ``public.soak_effects``) and its ``ack`` in one transaction: the consumer's own psycopg connection's, or
  ``client.transaction()``; runs until ``RUN_DIR/stop-consume`` exists.
- ``writer``: ``messages.add`` of unique messages to :data:`SHARED` (vectors enabled, the offline hashing
  embedder), in bursts; flushes its embeddings at the end.
- ``items``: ``items.put`` of unique keys, and reads one back now and then.
- ``searcher``: ``vectors.search`` on :data:`SHARED`, and a :class:`pgmem.cache.VectorCache` compared with
  an exact search whenever the memory's revision did not move around the pair (as
  ``tests/integration/cache_workers.py``); after ``RUN_DIR/final`` exists, :data:`FINAL_CHECKS` such
  comparisons more, on the quiet memory.

Producers stop at ``RUN_DIR/stop`` (finishing the call in hand). Each worker rewrites ``RUN_DIR/NAME.beat``
(when its last successful call began) at most every :data:`BEAT_EVERY` s, and writes ``RUN_DIR/NAME.json``
(its counts, errors and when its successful calls began and ended) when it ends.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import pq

import pgmem
from pgmem import doorbell
from pgmem.errors import CommitUnknown, LeaseLost, NotFound, PgmemError, Timeout

NAMESPACE = "soak"
QUEUE = "jobs"
SUBSCRIBER = "soak"
INBOX = f"inbox:{SUBSCRIBER}"
ENV = "env"
SHARED = "shared"
TIMEOUT = 2.0  # every call's (docs/reliability.md): a stalled network ends a call within it
LEASE = 10.0
BEAT_EVERY = 0.2
RECORD_EVERY = 0.05  # the resolution of the successes' record (its size stays small)
GIVE_UP = 60.0  # a call failing this long after the stop flag is abandoned (and reported)
FINAL_CHECKS = 20
TOLERANCE = 1e-5
WORDS = (
    "snake game board score level player tile merge web cli design review code test bug fix deploy "
    "server queue memory vector index search cache budget latency"
).split()

T = TypeVar("T")


class Worker:
    """A worker's bookkeeping: counts, errors by type, the times of its successful calls, its journal."""

    def __init__(self, role: str, name: str, run_dir: Path, via: str) -> None:
        self.role, self.name, self.dir, self.via = role, name, run_dir, via
        self.ops: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.untyped: list[dict[str, str]] = []  # the first few, with their tracebacks
        self.untyped_count = 0
        self.samples: dict[str, str] = {}  # one message per error type
        self.successes: list[tuple[float, float]] = []  # (start, end) of successful calls, 50 ms apart
        self.extra: dict[str, Any] = {}
        self.abandoned: list[str] = []
        self._beat = 0.0
        self._journal = open(run_dir / f"{name}.journal", "a", buffering=1)  # noqa: SIM115 - open for the run

    def flag(self, name: str) -> bool:
        return (self.dir / name).exists()

    def ok(self, op: str, started: float) -> None:
        """A call begun at ``started`` succeeded (recovery counts calls begun after a fault ended: a call in
        flight when the server is killed may still succeed)."""
        now = time.time()
        self.ops[op] += 1
        if not self.successes or now - self.successes[-1][1] >= RECORD_EVERY:
            self.successes.append((round(started, 3), round(now, 3)))
        if now - self._beat >= BEAT_EVERY:
            self._beat = now
            beat = self.dir / f"{self.name}.beat"
            tmp = beat.with_suffix(".tmp")
            tmp.write_text(repr(started))
            os.replace(tmp, beat)

    def failed(self, op: str, exc: BaseException, own: bool = False) -> None:
        kind = f"{type(exc).__module__}.{type(exc).__name__}"
        key = f"own:{kind}" if own else kind
        self.errors[key] += 1
        self.samples.setdefault(key, f"{op}: {str(exc)[:300]}")
        if not own and not isinstance(exc, PgmemError):
            self.untyped_count += 1
            if len(self.untyped) < 20:
                self.untyped.append({"op": op, "type": kind, "traceback": traceback.format_exc()[-3000:]})

    def journal(self, kind: str, ident: str) -> None:
        self._journal.write(f"{kind} {ident}\n")

    def until_done(self, op: str, call: Callable[[], T]) -> tuple[bool, T | None]:
        """``call()`` again after every error until it returns: (True, its result); (False, None) when it is
        abandoned (the test gave up waiting for the worker to stop)."""
        while True:
            started = time.time()
            try:
                result = call()
            except Exception as exc:  # noqa: BLE001 - counted by type: the soak wants typed errors only
                self.failed(op, exc)
                if self.giving_up(op):
                    return False, None
                time.sleep(0.05)
                continue
            self.ok(op, started)
            return True, result

    def giving_up(self, op: str) -> bool:
        if self.flag("stop") and self.flag("give-up"):
            self.abandoned.append(op)
            return True
        return False

    def once(self, op: str, call: Callable[[], T]) -> tuple[bool, T | None]:
        started = time.time()
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - counted by type
            self.failed(op, exc)
            time.sleep(0.05)
            return False, None
        self.ok(op, started)
        return True, result

    def connect(self) -> pgmem.Client:
        """A client, through the proxy or to the embedded server; connecting is retried like any call."""
        dsn = os.environ["SOAK_DSN"] if self.via == "proxy" else None
        make = partial(pgmem.connect, dsn, namespace=NAMESPACE, migrate=dsn is None, timeout=TIMEOUT, max_size=2)
        _, client = self.until_done("connect", make)
        assert client is not None
        return client

    def close(self) -> None:
        self._journal.close()
        report = {
            "role": self.role,
            "name": self.name,
            "via": self.via,
            "ops": dict(self.ops),
            "errors": dict(self.errors),
            "samples": self.samples,
            "untyped": self.untyped,
            "untyped_count": self.untyped_count,
            "abandoned": self.abandoned,
            "successes": self.successes,
            **self.extra,
        }
        tmp = self.dir / f"{self.name}.json.tmp"
        tmp.write_text(json.dumps(report))
        os.replace(tmp, self.dir / f"{self.name}.json")


def _text(rng: random.Random, ident: str) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(4)) + f" {ident}"


def publisher(w: Worker) -> None:
    rng = random.Random(w.name)
    with w.connect() as client:
        n = 0
        while not w.flag("stop"):
            if n % 2 == 0:
                # Publishing a message the memory already holds delivers nothing again: sent again as is.
                ident = f"{w.name}-p{n}"
                message = pgmem.Message(id=ident, content=_text(rng, ident))
                if w.until_done("publish", partial(client.queues.publish, ENV, message))[0]:
                    w.journal("P", ident)
            else:
                ident = f"{w.name}-q{n}"
                message = pgmem.Message(id=ident, content=_text(rng, ident))
                if w.until_done("push", partial(client.queues.push, QUEUE, message, idempotency_key=ident))[0]:
                    w.journal("Q", ident)
            n += 1


def _own_connection(w: Worker) -> psycopg.Connection[Any]:
    while True:
        try:
            return psycopg.connect(os.environ["SOAK_DSN"], autocommit=True, connect_timeout=int(TIMEOUT))
        except psycopg.Error as exc:
            w.failed("own-connect", exc, own=True)
            time.sleep(0.1)


class _Own(Exception):
    """The effect's own statement failed (the driver's error, in ``__cause__``): told apart from pgmem's."""


def _effect(conn: psycopg.Connection[Any], ident: str, worker: str) -> None:
    try:
        conn.execute("INSERT INTO soak_effects (message_id, worker) VALUES (%s, %s)", (ident, worker))
    except psycopg.Error as exc:
        raise _Own() from exc


def consumer(w: Worker) -> None:
    """The exactly-once consumer of docs/reliability.md: per item, the effect and the ack in one transaction,
    the caller's (``consumer``: its own psycopg connection, which it commits) or pgmem's
    (``tx-consumer``: ``client.transaction()``, whose COMMIT pgmem runs and types). A duplicated effect is a
    second row of the message's: the test counts them."""
    own_connection = w.role == "consumer"
    with w.connect() as client:
        own = _own_connection(w) if own_connection else None
        turn = 0
        while not w.flag("stop-consume"):
            queue = (QUEUE, INBOX)[turn % 2]
            turn += 1
            done, items = w.once("claim", partial(client.queues.claim, queue, 5, lease=LEASE))
            if not done or not items:
                if done and turn % 2 == 0:
                    time.sleep(0.05)
                continue
            for item in items:
                ident, started = item.message.id, time.time()
                try:
                    if own is not None:
                        with own.transaction():
                            _effect(own, ident, w.name)
                            client.queues.ack(item, connection=own)
                    else:
                        with client.transaction() as conn:
                            _effect(conn, ident, w.name)
                            client.queues.ack(item, connection=conn)
                except LeaseLost as exc:  # rolled back with the effect: the item is another claim's now
                    w.failed("ack", exc)
                    continue
                except _Own as exc:
                    w.failed("effect", exc.__cause__ or exc, own=True)
                except psycopg.Error as exc:  # the commit of the consumer's own transaction: the driver's
                    w.failed("commit" if own_connection else "ack", exc, own=own_connection)
                except Exception as exc:  # noqa: BLE001 - pgmem's, typed (claimed again later) or not
                    w.failed("ack", exc)
                else:
                    w.ok("ack", started)
                    w.journal("E", ident)
                    continue
                if own is not None and (own.broken or own.info.transaction_status != pq.TransactionStatus.IDLE):
                    own.close()
                    own = _own_connection(w)
                time.sleep(0.05)
        if own is not None:
            own.close()


def writer(w: Worker) -> None:
    rng = random.Random(w.name)
    ambiguous = {"committed": 0, "not_committed": 0}
    with w.connect() as client:
        n = 0
        while not w.flag("stop"):
            ident = f"{w.name}-a{n}"
            message = pgmem.Message(id=ident, content=_text(rng, ident))
            if _add(w, client, message, ambiguous):
                w.journal("A", ident)
            n += 1
            if n % 5 == 0:  # bursts and pauses: the searcher compares in the quiet windows
                time.sleep(rng.uniform(0.1, 0.3))
        w.until_done("flush", client.vectors.flush)  # the embeddings of what it added (background until now)
    w.extra["ambiguous_adds"] = ambiguous


def _add(w: Worker, client: pgmem.Client, message: pgmem.Message, ambiguous: dict[str, int]) -> bool:
    """Add until it is known to be stored; an add that may have committed is looked up first."""
    while True:
        started = time.time()
        try:
            client.messages.add(SHARED, message)
        except Exception as exc:  # noqa: BLE001 - counted by type; typed ones are retried
            w.failed("add", exc)
            if isinstance(exc, CommitUnknown) or (isinstance(exc, Timeout) and exc.may_have_committed):
                stored = _stored(w, client, message.id)
                if stored is None:
                    return False
                ambiguous["committed" if stored else "not_committed"] += 1
                if stored:
                    return True
            elif w.giving_up("add"):
                return False
            else:
                time.sleep(0.05)
        else:
            w.ok("add", started)
            return True


def _stored(w: Worker, client: pgmem.Client, ident: str) -> bool | None:
    while True:
        started = time.time()
        try:
            client.messages.get_message(ident)
        except NotFound:
            w.ok("lookup", started)
            return False
        except Exception as exc:  # noqa: BLE001 - counted by type
            w.failed("lookup", exc)
            if w.giving_up("lookup"):
                return None
            time.sleep(0.05)
        else:
            w.ok("lookup", started)
            return True


def items(w: Worker) -> None:
    rng = random.Random(w.name)
    path = ("store", w.name)
    lost_reads = []
    with w.connect() as client:
        n = 0
        while not w.flag("stop"):
            key, value = f"k{n}", {"n": n, "by": w.name}
            if w.until_done("put", partial(client.items.put, path, key, value))[0]:
                w.journal("I", key)
            if n % 10 == 9:  # read one back: a put that returned is there
                back = rng.randrange(n)
                done, row = w.once("get", partial(client.items.get, path, f"k{back}"))
                if done and (row is None or row.value != {"n": back, "by": w.name}):
                    lost_reads.append(back)
            n += 1
    w.extra["lost_reads"] = lost_reads


def same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
    """Equal up to ties (as ``tests/integration/cache_workers.same``)."""
    if len(got) != len(want):
        return False
    if any(abs(g[1] - v[1]) > TOLERANCE for g, v in zip(got, want, strict=True)):
        return False
    for (gid, gscore), (wid, _) in zip(got, want, strict=True):
        if gid != wid:
            tied = [i for i, s in want if abs(s - gscore) <= TOLERANCE]
            if gid not in tied and not (want and abs(gscore - want[-1][1]) <= TOLERANCE):
                return False
    return True


def searcher(w: Worker) -> None:
    from pgmem.cache import VectorCache

    rng = random.Random(w.name)
    tally = Counter[str]()
    mismatches: list[dict[str, Any]] = []
    waits: list[float] = []  # how long each comparison waited for its revision's announcement
    with w.connect() as client:
        _, cache = w.until_done("cache", partial(VectorCache, client))
        assert cache is not None

        def compare(final: bool) -> str:
            """Cache against exact search for one query: ``equal``, ``mismatch``, ``moved`` (a write came
            between: not comparable), ``undelivered`` (the revision was not announced in time) or ``error``."""
            query = client.embedder.embed([_text(rng, "q")])[0]
            done, before = w.once("head_rev", lambda: client.vectors.head_rev(SHARED))
            if not done or before is None:
                return "error"
            waited = time.monotonic()
            announced = cache.wait_announced(SHARED, before, timeout=30 if final else 5)
            waits.append(time.monotonic() - waited)
            if not announced:
                return "undelivered"
            done, got = w.once("cache_search", lambda: cache.search_vectors(SHARED, query, 10)[0])
            if not done or got is None:
                return "error"
            exact = partial(client.vectors.search, vector=query, memory=SHARED, k=10, mode="exact")
            done, hits = w.once("exact_search", exact)
            if not done or hits is None:
                return "error"
            done, after = w.once("head_rev", lambda: client.vectors.head_rev(SHARED))
            if not done or after != before:
                return "moved" if done else "error"
            want = [(h.message.id, h.score) for h in hits]
            if same(got, want):
                return "equal"
            mismatches.append({"final": final, "rev": before, "got": got[:3], "want": want[:3]})
            return "mismatch"

        while not w.flag("stop"):
            w.once("search", lambda: client.vectors.search(_text(rng, "s"), memory=SHARED, k=5))
            tally[compare(False)] += 1
            time.sleep(0.02)
        while not w.flag("final"):  # the test flushes the writers' embeddings, then sets it
            time.sleep(0.05)
        final = Counter[str]()
        while final["equal"] + final["mismatch"] < FINAL_CHECKS and sum(final.values()) < 10 * FINAL_CHECKS:
            final[compare(True)] += 1
        stats = cache.stats
        bell = doorbell.acquire(client.secret_conninfo() or "")  # the cache's own (one per process)
        w.extra["cache"] = {
            "hits": stats.hits,
            "catch_ups": stats.catch_ups,
            "loads": stats.loads,
            "notifications": stats.notifications,
            "listener_reconnects": stats.reconnects,
            "silences": stats.silences,
            "doorbell_reconnects": bell.stats.reconnects,
            "waits_over_1s": sum(1 for x in waits if x > 1),
            "longest_wait": round(max(waits, default=0.0), 2),
        }
        doorbell.release(bell)
        cache.close()
    w.extra["compared"] = dict(tally)
    w.extra["final"] = dict(final)
    w.extra["mismatches"] = mismatches[:10]


ROLES: dict[str, Callable[[Worker], None]] = {
    "publisher": publisher,
    "consumer": consumer,
    "tx-consumer": consumer,
    "writer": writer,
    "items": items,
    "searcher": searcher,
}


def main(role: str, name: str, run_dir: str, via: str) -> None:
    w = Worker(role, name, Path(run_dir), via)
    try:
        ROLES[role](w)
    finally:
        w.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
