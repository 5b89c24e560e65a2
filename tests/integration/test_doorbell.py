"""The doorbell (issue 32, :mod:`pgmem.doorbell`): writers ring ``pgmem.doorbell`` in their own transaction,
one process per database (the holder of the advisory lock ``LOCK_KEY``) announces committed rings.

Real processes throughout (``tests.integration.doorbell_workers``), killed with SIGKILL or stopped where the
test says so. Consumers wait with a ``poll_interval`` of an hour: every wake-up these tests see came from a
notification. No assertion is on a duration: each wait for an event that takes milliseconds is bounded
generously (:data:`DEADLINE`), and the measured times are printed.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

import pgmem
from pgmem import Message, doorbell
from pgmem.cache import VectorCache
from pgmem.planning import notify
from tests.integration.cache_workers import same
from tests.integration.doorbell_workers import LEASE, NAMESPACE, POLL_INTERVAL, QUEUE

ROOT = Path(__file__).resolve().parents[2]
#: How long any event that normally takes milliseconds may take before a test fails (a busy machine).
DEADLINE = 60.0
#: LOCK_KEY as pg_locks shows an advisory lock on a bigint: classid the high 32 bits, objid the low 32.
CLASSID, OBJID = doorbell.LOCK_KEY >> 32, doorbell.LOCK_KEY & 0xFFFFFFFF
_HOLDER = """
SELECT l.pid, a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 AND l.granted"""
_TAG = re.compile(r"[0-9a-f]{32}")

T = TypeVar("T")


def wait_for(probe: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
    """Poll ``probe`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    give_up = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > give_up:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.005)


def holder(dsn: str) -> tuple[int, str] | None:
    """(backend pid, application_name) of the session holding the doorbell's lock in ``dsn``'s database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(_HOLDER, (CLASSID, OBJID)).fetchall()
    assert len(rows) <= 1, rows
    return (rows[0][0], rows[0][1]) if rows else None


def scalar(dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def doorbell_rows(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgmem.doorbell"))  # a superuser: no row-level security


def queue_tag(dsn: str, namespace: str, queue: str) -> str:
    return notify.tag(str(scalar(dsn, "SELECT pgmem.notify_key(%s)", (namespace,))), queue)


def listener(dsn: str, *channels: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    for channel in channels:
        conn.execute(f"LISTEN {channel}")
    return conn


def collect(conn: psycopg.Connection[Any], until: Callable[[list[str]], bool], what: str) -> list[str]:
    """Payloads received on ``conn`` until ``until(payloads)`` holds (fail after :data:`DEADLINE`)."""
    payloads: list[str] = []
    give_up = time.monotonic() + DEADLINE
    while not until(payloads):
        if time.monotonic() > give_up:
            pytest.fail(f"{what}: not within {DEADLINE:.0f} s (received {payloads[-20:]})")
        payloads += [n.payload for n in conn.notifies(timeout=0.1)]
    return payloads


def drain(conn: psycopg.Connection[Any], seconds: float) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=seconds)]


class Workers:
    """Worker processes (``tests.integration.doorbell_workers``); each still alive at the end is killed."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        self.dsn = dsn
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []
        self._n = 0

    def spawn(self, role: str, *args: object, stdin: bool = False) -> subprocess.Popen[str]:
        self._n += 1
        name = f"{role}-{self._n}"
        with (self.tmp / f"{name}.out").open("w") as out, (self.tmp / f"{name}.err").open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.doorbell_workers", role, *map(str, args)],
                env={**os.environ, "PGMEM_DSN": self.dsn, "PYTHONPATH": str(ROOT)},
                cwd=ROOT,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdin else out,
                stderr=err,
                text=True,
            )
        proc.name = name  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[str]) -> tuple[str, str]:
        name = proc.name  # type: ignore[attr-defined]
        out = self.tmp / f"{name}.out"
        return (out.read_text() if out.exists() else ""), (self.tmp / f"{name}.err").read_text()

    def finished(self, proc: subprocess.Popen[str], timeout: float = DEADLINE) -> str:
        """Wait for ``proc`` to exit 0; its stdout."""
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{proc.args!r} still running after {timeout:.0f} s")
        out, err = self.output(proc)
        assert proc.returncode == 0, err
        return out

    def reported(self, role: str, *args: object, stdin: bool = False) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        """Start a worker that writes a report file, and wait for the report."""
        path = self.tmp / f"report-{self._n + 1}.json"
        proc = self.spawn(role, path, *args, stdin=stdin)

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"{role} exited with {proc.returncode}: {self.output(proc)[1]}")
            return path.exists()

        wait_for(ready, f"the {role} worker's report")
        return proc, json.loads(path.read_text())

    def kill(self, proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            proc.send_signal(sig)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(dsn, tmp_path)
    yield w
    w.close()


class Consumer(threading.Thread):
    """A consumer in this process: waits on ``queue`` (poll_interval an hour) until it has ``expected``
    items or ``stop`` is set, acknowledging what it claims. Its own client, so its own doorbell candidacy
    (shared with every other listener of this process on the same DSN)."""

    def __init__(
        self, dsn: str, queue: str, expected: int, *, timeout: float = DEADLINE, n: int = 5, max_waits: int = 10**9
    ) -> None:
        super().__init__(daemon=True)
        self.client = pgmem.connect(dsn, namespace=NAMESPACE, max_size=2)
        self.queue, self.expected, self.timeout, self.n, self.max_waits = queue, expected, timeout, n, max_waits
        self.items: list[tuple[str, float]] = []  # (message id, when claimed: time.monotonic())
        self.waits: list[float] = []
        self.empty = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while len(self.items) < self.expected and len(self.waits) < self.max_waits and not self.stop.is_set():
                started = time.monotonic()
                got = self.client.queues.wait(
                    self.queue, self.n, timeout=self.timeout, poll_interval=POLL_INTERVAL, lease=LEASE
                )
                now = time.monotonic()
                self.waits.append(now - started)
                if not got:
                    self.empty += 1
                    continue
                self.items += [(item.message.id, now) for item in got]
                self.client.queues.ack(got)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def finish(self, timeout: float = DEADLINE) -> None:
        self.join(timeout)
        alive = self.is_alive()
        if alive:
            self.stop.set()
        else:
            self.client.close()
        assert not alive, f"the consumer still waits after {timeout:.0f} s with {len(self.items)} items"
        assert self.error is None, repr(self.error)


# -- 1. wake-ups under concurrent pushers ---------------------------------------------------------------


def _acked(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM doorbell_done"))


def _run_wake_ups(
    dsn: str, workers: Workers, *, pushers: int, per_pusher: int, consumers: int, quota: tuple[int, int], pings: int
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE doorbell_done (item_id bigint NOT NULL, message_id text NOT NULL, worker text)")
    rng = random.Random(32)
    total = pushers * per_pusher
    live: dict[str, subprocess.Popen[str]] = {}
    reports: list[dict[str, Any]] = []
    started = 0
    give_up = time.monotonic() + 4 * DEADLINE

    def reap(restart: bool) -> None:
        nonlocal started
        for name, proc in list(live.items()):
            if proc.poll() is not None:
                del live[name]
                out, err = workers.output(proc)
                assert proc.returncode == 0, err
                reports.append(json.loads(out.strip().splitlines()[-1]))
        while restart and len(live) < consumers:
            started += 1
            name = f"c{started}"
            live[name] = workers.spawn("consume", name, rng.randint(*quota), rng.randrange(1 << 30))

    def until(done: Callable[[], bool], what: str, restart: bool = True) -> None:
        while not done():
            reap(restart)
            if time.monotonic() > give_up:
                pytest.fail(
                    f"{what}: stalled (acked {_acked(dsn)} of {total}; doorbell rows {doorbell_rows(dsn)}; "
                    f"holder {holder(dsn)}; depth {scalar(dsn, 'SELECT count(*) FROM pgmem.queue_items')})"
                )
            time.sleep(0.02)

    def acked(n: int) -> Callable[[], bool]:
        return lambda: _acked(dsn) == n

    t0 = time.monotonic()
    reap(restart=True)
    until(lambda: holder(dsn) is not None, "a consumer's doorbell takes the lock")
    push_procs = [workers.spawn("push", i, per_pusher, rng.randrange(1 << 30)) for i in range(pushers)]
    until(acked(total), "every pushed item acknowledged")
    for proc in push_procs:
        workers.finished(proc)
    t_pushed = time.monotonic()
    # Isolated wake-ups: one item at a time in an empty queue; each is claimed only if its notification
    # reaches a waiting consumer (none would poll within the hour).
    with pgmem.connect(dsn, namespace=NAMESPACE, max_size=1) as client:
        for k in range(pings):
            client.queues.push(QUEUE, Message(id=f"ping-{k}", content="ping"))
            until(acked(total + k + 1), f"ping {k} acknowledged")
        # Stop the consumers: one stop item at a time, each taken by one consumer, which exits.
        stops = 0
        reap(restart=False)
        while live:
            client.queues.push(QUEUE, Message(id=f"stop-{stops}", content="stop"))
            stops += 1
            until(acked(total + pings + stops), f"stop item {stops} acknowledged", restart=False)
            taker = scalar(dsn, "SELECT worker FROM doorbell_done WHERE message_id = %s", (f"stop-{stops - 1}",))
            if taker in live:
                workers.finished(live[taker])
            reap(restart=False)
        assert client.queues.depth(QUEUE) == {"ready": 0, "claimable": 0, "dead": 0}
    elapsed = time.monotonic() - t0

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT message_id, count(*) FROM doorbell_done GROUP BY message_id").fetchall()
    counts: dict[str, int] = dict(rows)
    expected = {f"p{i}-{j}" for i in range(pushers) for j in range(per_pusher)}
    expected |= {f"ping-{k}" for k in range(pings)} | {f"stop-{s}" for s in range(stops)}
    assert set(counts) == expected  # none lost, none foreign
    assert [m for m, n in counts.items() if n != 1] == []  # each acknowledged exactly once
    waits = [w for r in reports for w in r["waits"]]
    assert sum(r["empty"] for r in reports) == 0  # no wait ran out
    assert max(waits) < POLL_INTERVAL  # every wake-up came from a notification
    assert len(reports) == started > consumers  # consumers stopped and new ones started mid-run
    assert sum(r["done"] for r in reports) == len(expected)
    assert sum(r["elections"] for r in reports) >= 1
    assert doorbell_rows(dsn) == 0  # everything rung was announced
    print(
        f"\n{total} pushes from {pushers} processes, {pings} isolated pushes: {started} consumer processes, "
        f"{len(waits)} waits (longest {max(waits):.2f} s), {sum(r['elections'] for r in reports)} doorbell "
        f"elections; pushes done after {t_pushed - t0:.1f} s, all in {elapsed:.1f} s"
    )


@pytest.mark.slow
def test_no_wake_up_is_lost_under_concurrent_pushers(dsn: str, workers: Workers) -> None:
    _run_wake_ups(dsn, workers, pushers=3, per_pusher=667, consumers=3, quota=(100, 300), pings=20)


@pytest.mark.fullsize
def test_no_wake_up_is_lost_under_concurrent_pushers_fullsize(dsn: str, workers: Workers) -> None:
    _run_wake_ups(dsn, workers, pushers=4, per_pusher=2500, consumers=4, quota=(200, 1500), pings=200)


# -- 2. the holder killed or stalled ---------------------------------------------------------------------


def leading_backend(bell: doorbell.Doorbell | None) -> int | None:
    """The backend pid of ``bell``'s connection while it holds the lock."""
    conn = bell._conn if bell is not None and bell.leading else None
    return conn.info.backend_pid if conn is not None else None


def watch_takeover(dsn: str, old: int) -> tuple[threading.Thread, list[float]]:
    """A thread noting when (time.monotonic()) a session other than backend ``old`` holds the lock."""
    seen: list[float] = []

    def watch() -> None:
        give_up = time.monotonic() + DEADLINE
        while time.monotonic() < give_up:
            now = holder(dsn)
            if now is not None and now[0] != old:
                seen.append(time.monotonic())
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, seen


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_holder_that_dies_or_stalls_is_replaced(dsn: str, workers: Workers, fault: str) -> None:
    """The holder (another process) is killed with SIGKILL, or stopped with SIGSTOP (its session then ends
    by idle_session_timeout), while pushes go on: the consumer in this process, a candidate, takes over
    and gets every item."""
    hold, info = workers.reported("hold")
    assert holder(dsn) == (info["backend"], doorbell.APPLICATION_NAME)
    before, after = 30, 30
    consumer = Consumer(dsn, "q", before + after)
    consumer.start()
    wait_for(lambda: consumer.client.queues._doorbell is not None, "the consumer listens")
    with pgmem.connect(dsn, namespace=NAMESPACE, max_size=1) as client:
        for i in range(before):
            client.queues.push("q", Message(id=f"before-{i}", content="x"))
        wait_for(lambda: len(consumer.items) == before, "the items pushed before the fault")
        assert holder(dsn) == (info["backend"], doorbell.APPLICATION_NAME)  # the other process still rings
        assert leading_backend(consumer.client.queues._doorbell) is None  # this one is a candidate
        watcher, taken_at = watch_takeover(dsn, info["backend"])
        workers.kill(hold, signal.SIGKILL if fault == "SIGKILL" else signal.SIGSTOP)
        t_fault = time.monotonic()
        for i in range(after):  # during the gap: rung, announced by the next holder
            client.queues.push("q", Message(id=f"after-{i}", content="x"))
            time.sleep(0.01)
        watcher.join(DEADLINE + 5)
        assert taken_at, "no other session took the lock"
        new = holder(dsn)
        assert new is not None and new[1] == doorbell.APPLICATION_NAME
        assert new[0] == wait_for(lambda: leading_backend(consumer.client.queues._doorbell), "this process leads")
        consumer.finish()
    claimed = [t - t_fault for m, t in consumer.items if m.startswith("after-")]
    assert sorted(m for m, _ in consumer.items) == sorted(
        [f"before-{i}" for i in range(before)] + [f"after-{i}" for i in range(after)]
    )
    assert consumer.empty == 0 and max(consumer.waits) < POLL_INTERVAL
    assert doorbell_rows(dsn) == 0
    workers.kill(hold)  # a stopped process dies of SIGKILL too
    print(
        f"\n{fault}: lock taken over after {taken_at[0] - t_fault:.2f} s; the items pushed after the fault "
        f"claimed from {min(claimed):.2f} s to {max(claimed):.2f} s after it"
    )


# -- 3. cache freshness across processes ---------------------------------------------------------------


class Writer:
    """A writer process: adds messages to a memory on command, answering with its head revision."""

    def __init__(self, workers: Workers) -> None:
        self.proc, _ = workers.reported("write", stdin=True)

    def add(self, memory: str, message_id: str, content: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"add {memory} {message_id} {content}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()  # the worker answers within DEADLINE or dies (then EOF)
        assert line, f"the writer died (exit {self.proc.poll()})"
        return int(json.loads(line)["rev"])


def _exact(client: pgmem.Client, memory: str, query: Any, k: int = 10) -> list[tuple[str, float]]:
    return [(h.message.id, h.score) for h in client.search(vector=query, memory=memory, k=k, mode="exact")]


@pytest.mark.slow
def test_cache_stays_fresh_when_the_holder_dies_or_nobody_rings(
    dsn: str, client: pgmem.Client, workers: Workers
) -> None:
    memory = "facts"
    client.vectors.enable(memory)
    client.messages.add_many(memory, [Message(id=f"m{i}", content=f"fact {i} colour {i % 5}") for i in range(20)])
    client.vectors.flush()
    hold, info = workers.reported("hold")
    writer = Writer(workers)
    with VectorCache(client) as cache:
        wait_for(lambda: cache.connected, "the cache hears the other process's beats")
        assert holder(dsn) == (info["backend"], doorbell.APPLICATION_NAME)

        def check(message_id: str, content: str) -> None:
            query = client.embedder.embed([content])[0]
            got = cache.search_vectors(memory, query, 5)[0]
            assert got[0][0] == message_id and same(got, _exact(client, memory, query, 5)), got

        check("m3", "fact 3 colour 3")
        # A peer's write, announced by the holder.
        rev = writer.add(memory, "peer-1", "a note from a peer process")
        assert cache.wait_announced(memory, rev, timeout=DEADLINE)
        check("peer-1", "a note from a peer process")

        # The holder killed; a write in the gap is announced by the next holder (this process).
        workers.kill(hold)
        rev = writer.add(memory, "peer-2", "written while nobody rang")
        assert cache.wait_announced(memory, rev, timeout=DEADLINE)
        check("peer-2", "written while nobody rang")
        bell = wait_for(lambda: leading_backend(cache._doorbell), "this process's doorbell leads")
        wait_for(lambda: cache.connected, "the cache hears the new holder's beats")
        print(f"\nsilences after the SIGKILL: {cache.stats.silences}")

        # Nobody rings: a session takes the lock first in line while the holder's session is ended (a
        # lost network), and keeps it. The beats stop; the cache stops trusting its entries and catches up
        # before answering, so a peer's unannounced write is in the very next answer.
        with psycopg.connect(dsn, autocommit=True) as squatter, psycopg.connect(dsn, autocommit=True) as admin:
            taken = threading.Thread(
                target=squatter.execute, args=("SELECT pg_advisory_lock(%s)", (doorbell.LOCK_KEY,))
            )
            taken.start()
            wait_for(
                lambda: (
                    admin.execute(
                        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                        (squatter.info.backend_pid,),
                    ).fetchone()
                    == (True,)
                ),
                "the squatter waits for the lock",
            )
            silences = cache.stats.silences
            assert admin.execute("SELECT pg_terminate_backend(%s)", (bell,)).fetchone() == (True,)
            taken.join(DEADLINE)
            assert not taken.is_alive()
            squatting = holder(dsn)
            assert squatting is not None and squatting[0] == squatter.info.backend_pid
            wait_for(lambda: not cache.connected, "the cache notices the silence")
            assert cache.stats.silences > silences
            rev = writer.add(memory, "peer-3", "nobody announced this one")
            assert doorbell_rows(dsn) >= 1  # rung, waiting for a holder
            catch_ups = cache.stats.catch_ups
            check("peer-3", "nobody announced this one")  # no wait: read through
            assert cache.stats.catch_ups == catch_ups + 1
            assert cache.announced(memory) == rev  # known by reading it, not by an announcement
        # The squatter's session is gone: this process rings again, announces the write, beats return.
        assert cache.wait_announced(memory, rev, timeout=DEADLINE)
        wait_for(lambda: cache.connected, "beats return")
        wait_for(lambda: doorbell_rows(dsn) == 0, "the waiting ring is announced")
        check("peer-3", "nobody announced this one")

        def from_memory() -> bool:  # trusted again: answered without a round trip
            hits = cache.stats.hits
            check("peer-3", "nobody announced this one")
            return cache.stats.hits == hits + 1

        wait_for(from_memory, "an answer from the cache alone")
    assert writer.proc.stdin is not None
    writer.proc.stdin.write("quit\n")
    writer.proc.stdin.flush()
    assert writer.proc.wait(DEADLINE) == 0


# -- 4. a push in the caller's transaction ---------------------------------------------------------------


def test_a_push_that_rolls_back_wakes_nobody_one_that_commits_wakes_after_commit(
    dsn: str, client: pgmem.Client
) -> None:
    tag, marker = queue_tag(dsn, NAMESPACE, "q"), queue_tag(dsn, NAMESPACE, "marker")
    with listener(dsn, "pgmem_queue") as heard:
        consumer = Consumer(dsn, "q", 1, timeout=3.0, max_waits=1)
        consumer.start()
        wait_for(lambda: holder(dsn), "this process's doorbell leads")
        with pytest.raises(RuntimeError), client.transaction() as conn:
            client.queues.push("q", Message(id="rolled-back", content="x"), connection=conn)
            assert conn.execute("SELECT count(*) FROM pgmem.doorbell").fetchone() == (1,)  # our own ring
            time.sleep(0.5)  # the doorbell rings meanwhile: the ring is not committed
            raise RuntimeError("the caller fails")
        # A committed push after the rollback: once its notification is heard, every round that could
        # have announced the rolled-back one has run.
        client.queues.push("marker", Message(content="barrier"))
        payloads = collect(heard, lambda p: marker in p, "the marker's notification")
        assert tag not in payloads
        consumer.finish()
        assert consumer.items == [] and consumer.empty >= 1  # woke on nothing, timed out
        assert doorbell_rows(dsn) == 0
        assert client.queues.depth("q")["ready"] == 0

        consumer = Consumer(dsn, "q", 1)
        consumer.start()
        wait_for(lambda: consumer.client.queues._listener is not None, "the consumer listens")
        with client.transaction() as conn:
            client.queues.push("q", Message(id="committed", content="x"), connection=conn)
            early = drain(heard, 1.0)  # the transaction stays open a second, the doorbell ringing
            assert consumer.items == []
            committing = time.monotonic()
        assert tag not in early
        collect(heard, lambda p: tag in p, "the committed push's notification")
        consumer.finish()
        assert [m for m, _ in consumer.items] == ["committed"]
        assert consumer.items[0][1] > committing
        assert consumer.empty == 0 and max(consumer.waits) < POLL_INTERVAL
        assert doorbell_rows(dsn) == 0


# -- 5. tenants ------------------------------------------------------------------------------------------


@pytest.fixture
def app_conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A raw connection acting as pgmem_app, as a client's pooled connections do."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_app")
        yield conn


def _write_as(dsn: str, namespace: str, suffix: str) -> None:
    with pgmem.connect(dsn, namespace=namespace, max_size=2) as c:
        c.vectors.enable(f"secret-memory-{suffix}")
        c.messages.add(f"secret-memory-{suffix}", Message(content=f"private words of {namespace}"))
        c.vectors.flush()
        c.queues.push(f"secret-queue-{suffix}", Message(content=f"a job of {namespace}"))


def _only_tags(payloads: list[str]) -> None:
    for payload in payloads:
        assert "tenant" not in payload and "secret" not in payload, payload
        if payload == doorbell.BEAT or _TAG.fullmatch(payload):
            continue
        tag, rev = json.loads(payload)
        assert _TAG.fullmatch(tag) and isinstance(rev, int), payload


def test_tenants_see_only_tags_and_only_their_own_rings(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    # Nobody listens yet: the rings wait in the table.
    _write_as(dsn, "tenant-a", "a")
    _write_as(dsn, "tenant-b", "b")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT namespace, count(*) FROM pgmem.doorbell GROUP BY 1").fetchall()
    by_ns: dict[str, int] = dict(rows)
    assert by_ns["tenant-a"] >= 2 and by_ns["tenant-b"] >= 2, by_ns

    assert app_conn.execute("SELECT count(*) FROM pgmem.doorbell").fetchone() == (0,)  # no namespace
    app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', false)")
    seen = app_conn.execute("SELECT namespace, count(*) FROM pgmem.doorbell GROUP BY 1").fetchall()
    assert seen == [("tenant-a", by_ns["tenant-a"])]
    with pytest.raises(psycopg.errors.InsufficientPrivilege), app_conn.transaction():
        app_conn.execute(
            "INSERT INTO pgmem.doorbell (namespace, channel, name) VALUES ('tenant-b', 'pgmem_queue', 'x')"
        )
    # Rings are only inserted by the app role: deleting, updating or locking them is pgmem.ring_doorbell's.
    for statement in (
        "DELETE FROM pgmem.doorbell",
        "UPDATE pgmem.doorbell SET rev = 0",
        "SELECT 1 FROM pgmem.doorbell FOR UPDATE",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app_conn.transaction():
            app_conn.execute(statement)
    app_conn.execute("SELECT set_config('pgmem.namespace', '', false)")

    tags = {
        queue_tag(dsn, "tenant-a", "secret-queue-a"),
        queue_tag(dsn, "tenant-b", "secret-queue-b"),
        queue_tag(dsn, "tenant-a", "secret-memory-a"),
        queue_tag(dsn, "tenant-b", "secret-memory-b"),
    }
    with listener(dsn, "pgmem_queue", "pgmem_vectors") as heard:
        heard.execute("SET ROLE pgmem_app")
        # The app role rings (SECURITY DEFINER): every tenant's rings are announced and deleted.
        assert app_conn.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone() == (4,)
        assert doorbell_rows(dsn) == 0

        def announced(payloads: list[str]) -> set[str]:
            return {p if _TAG.fullmatch(p) else json.loads(p)[0] for p in payloads if p != doorbell.BEAT}

        payloads = collect(heard, lambda p: announced(p) >= tags, "every tenant's tags")
        _only_tags(payloads)
        assert doorbell.BEAT not in payloads  # ring_doorbell(0, false): no beat

        # With a holder ringing, another namespace's pushes and writes reach a listener as tags only.
        bell = doorbell.acquire(dsn)
        try:
            wait_for(lambda: bell.leading, "this process's doorbell leads")
            _write_as(dsn, "tenant-b", "b")
            mine = {queue_tag(dsn, "tenant-b", "secret-queue-b"), queue_tag(dsn, "tenant-b", "secret-memory-b")}
            more = collect(heard, lambda p: announced(p) >= mine and doorbell.BEAT in p, "tenant-b's new tags")
            _only_tags(more)
        finally:
            doorbell.release(bell)
    assert doorbell_rows(dsn) == 0


# -- 6. rows deleted only by the transaction that announces them ----------------------------------------


def test_rings_are_deleted_only_by_the_transaction_that_announces_them(
    dsn: str, client: pgmem.Client, workers: Workers
) -> None:
    tag = queue_tag(dsn, NAMESPACE, "q")
    for i in range(3):  # nobody listens: no holder, the rings wait
        client.queues.push("q", Message(id=f"job-{i}", content="x"))
    assert doorbell_rows(dsn) == 3
    with listener(dsn, "pgmem_queue") as heard, psycopg.connect(dsn) as ringer, psycopg.connect(dsn) as other:
        # Rung and rolled back: the rows stay, nothing is heard.
        assert ringer.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone() == (1,)  # one per queue
        assert ringer.execute("SELECT count(*) FROM pgmem.doorbell").fetchone() == (0,)
        assert doorbell_rows(dsn) == 3
        ringer.rollback()
        assert doorbell_rows(dsn) == 3

        # A process killed (SIGKILL) with its ring's transaction open: the rows stay.
        proc, info = workers.reported("ring")
        assert info["sent"] == 1
        workers.kill(proc)
        proc.wait(DEADLINE)
        wait_for(
            lambda: scalar(dsn, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (info["backend"],)),
            "the killed ringer's backend ends",
        )
        assert doorbell_rows(dsn) == 3

        # Two rings racing while the first's transaction is open (the second waits for the first's row
        # locks, or passes them by): whether the first commits or rolls back, each ring is announced once.
        waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        for first_commits in (False, True):
            if first_commits:
                client.queues.push("q", Message(id="job-3", content="x"))
            assert ringer.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone() == (1,)
            result: list[Any] = []

            def ring(result: list[Any] = result) -> None:
                result.append(other.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone())

            second = threading.Thread(target=ring)
            second.start()

            def waits_or_returned(result: list[Any] = result) -> bool:
                return bool(result) or bool(scalar(dsn, waiting, (other.info.backend_pid,)))

            wait_for(waits_or_returned, "the second ring waits for the first's row locks or returns")
            if first_commits:
                ringer.commit()
            else:
                ringer.rollback()
            second.join(DEADLINE)
            assert not second.is_alive()
            other.commit()
            if result == [(0,)] and not first_commits:  # it passed the locked rows by: they wait for the next
                assert doorbell_rows(dsn) == 3
                assert other.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone() == (1,)
                other.commit()
            else:
                assert result == ([(0,)] if first_commits else [(1,)])
            assert doorbell_rows(dsn) == 0
            payloads = collect(heard, lambda p: tag in p, "the announcement")
            payloads += drain(heard, 0.2)
            assert payloads == [tag]  # once, not twice


def test_a_session_holding_rings_locked_does_not_stall_the_doorbell(
    dsn: str, app_conn: psycopg.Connection[Any]
) -> None:
    with pgmem.connect(dsn, namespace="tenant-a", max_size=1) as a:
        a.queues.push("qa", Message(content="x"))  # nobody listens: the ring waits in the table
    app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', false)")
    tag = queue_tag(dsn, "tenant-b", "qb")
    a_tag = queue_tag(dsn, "tenant-a", "qa")
    with listener(dsn, "pgmem_queue") as heard:
        # A ring left open (the function is anyone's): tenant-a's ring is deleted, not committed, and locked
        app_conn.execute("BEGIN")
        assert app_conn.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone() == (1,)
        bell = doorbell.acquire(dsn)
        try:
            backend = wait_for(lambda: leading_backend(bell), "this process's doorbell leads")
            with pgmem.connect(dsn, namespace="tenant-b", max_size=1) as b:
                b.queues.push("qb", Message(content="for b"))
            stalled = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"

            def heard_or_stalled(payloads: list[str]) -> bool:
                assert not scalar(dsn, stalled, (backend,)), "the doorbell waits for tenant-a's row lock"
                return tag in payloads

            collect(heard, heard_or_stalled, "tenant-b's notification")
            # The open ring rolls back: its row is back, and the doorbell announces it in a later round.
            app_conn.execute("ROLLBACK")
            collect(heard, lambda payloads: a_tag in payloads, "tenant-a's notification after the rollback")
            assert doorbell_rows(dsn) == 0
        finally:
            doorbell.release(bell)


def test_requeue_and_a_retrying_nack_ring_the_doorbell(dsn: str) -> None:
    """Both make an item claimable again: a consumer waiting on the queue hears of it (a nack that
    dead-letters rings nothing: no consumer can take a dead letter)."""
    bell = doorbell.acquire(dsn)
    try:
        with pgmem.connect(dsn, namespace="ns", max_size=1) as client, listener(dsn, "pgmem_queue") as heard:
            tag = queue_tag(dsn, "ns", "jobs")
            q = client.queues
            q.push("jobs", Message(content="retried"), max_attempts=3)
            q.push("jobs", Message(content="dies"), max_attempts=1, priority=1)
            collect(heard, lambda payloads: tag in payloads, "the pushes")
            [retried] = q.claim("jobs")
            assert q.nack(retried, error="once more", retry_in=0) == "ready"
            collect(heard, lambda payloads: tag in payloads, "the retrying nack")
            [again] = q.claim("jobs", lease=60)  # the retried item is claimable again, then the other
            assert again.message.content == "retried"
            [dying] = q.claim("jobs")
            assert dying.message.content == "dies"
            assert q.nack(dying, error="fatal") == "dead"
            assert drain(heard, 0.3) == []  # dead-lettering rings nothing
            assert q.requeue("jobs") == 1
            collect(heard, lambda payloads: tag in payloads, "the requeue")
            assert doorbell_rows(dsn) == 0
    finally:
        doorbell.release(bell)


def test_a_lost_session_starts_the_backoff_over(dsn: str) -> None:
    """Only failed connects in a row back off: a session that was up and is lost waits the first delay
    again (each lost session waited twice the last, up to 5 s, for the life of the process: found by the
    chaos soak, tests/faults/test_chaos_soak.py)."""
    bell = doorbell.acquire(dsn)
    try:
        for round_ in range(5):
            backend = wait_for(lambda: leading_backend(bell), "the doorbell leads")
            with psycopg.connect(dsn, autocommit=True) as admin:
                assert admin.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
            wait_for(lambda b=backend: (leading_backend(bell) or b) != b, "the doorbell leads again")
            assert bell.stats.reconnects >= round_ + 1
            assert bell.stats.last_wait == doorbell.RETRY_SECONDS
    finally:
        doorbell.release(bell)
