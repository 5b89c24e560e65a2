"""Many writers at once (issue 32): N processes each loop one write, pgmem against the same statements with
no notification at all, and how many busy backends wait on the notification lock.

    python -m benchmarks.writers                     # 1, 8, 32 processes (64 too with 16+ cores), 8 s
    python -m benchmarks.writers --quick             # 1 and 8 processes, 3 s (a smoke run, ~2 minutes)
    python -m benchmarks.writers --processes 1,8,32,64 --seconds 8 --rounds 2 --ops push,claim

A transaction that sends NOTIFY takes a cluster-wide lock at commit (the ``object`` lock on database 0)
and holds it through its WAL flush, so notifying writers commit one at a time: their backends wait with
``wait_event_type = 'Lock'``, ``wait_event = 'object'``. Since migration 0012 writers ring
``pgmem.doorbell`` (an unlogged heap insert in their own transaction) and one elected process per database
(``pgmem.doorbell``, connections named ``pgmem-doorbell``) deletes the rings and notifies.

Operations (one per run; every process loops it for ``--seconds`` after a common start signal):

* ``push``: ``client.queues.push("jobs", Message)``, one new message and item per call.
* ``publish``: ``client.queues.publish("team", Message)`` to a memory with an embedding model (vectors on:
  each entry is queued in ``pgmem.embedding_outbox`` by the trigger), addressed to the next process's
  subscriber: one message, one entry, one outbox row, one inbox delivery and one ring per call.
* ``add``: ``client.messages.add("team", Message)`` to that memory, with every process's background
  embedder running (a lookup of the real MiniLM vectors of ``../shared/data/minilm-cpython-comments``: no
  model runs). The ring comes from the embedder's transaction (``pgmem.log_vector_changes``, called by the
  ``embeddings_added`` trigger), not from the add's.
* ``claim``: ``items = client.queues.claim("work", n=1, ack=items)`` on a prefilled queue (no statement of
  the loop rings or notifies: the control).
* ``put``: LangGraph's store (``pgmem.integrations.langgraph.PgmemStore``, index on the field ``text``, the
  lookup embedder) ``store.put(("team", "notes"), key, {"text": ...})``, a new key per call: one item and
  its vector per call, all under one namespace path (issue 38). Contenders ``pgmem`` and ``spread``.

Contenders, interleaved within each process count and round (the order alternates):

* ``pgmem``: the public API, one client per process (pool of 1, of 2 for ``add``: the embedder's). With
  ``--listen`` (default) one more process waits on an unrelated queue (``client.queues.wait``), so a
  doorbell is elected and drains the rings during the run, as in production; its draining is in the cost.
* ``floor``: the same statements with no notification at all, through pgmem's own path: the pgmem API,
  its ``push`` / ``publish`` statement with the ``rung`` CTE (the doorbell insert) removed and its count
  replaced by 0 (``client.queues.queries`` of each process); for ``add`` (the ring is in a trigger of the
  embedder's transaction) the pgmem API in a database where a ``BEFORE INSERT ... FOR EACH ROW`` trigger on
  ``pgmem.doorbell`` returns NULL (no ring is stored, nobody notifies; the trigger costs one PL/pgSQL call
  per embedder transaction). No doorbell holder runs. pgmem / floor is what the doorbell costs a writer.
* ``hand``: the statements of ``floor`` issued by hand with psycopg (``pgmem.planning.statements``, the
  same parameters from ``pgmem.planning.rows.encode``), autocommit, prepared, binary, one plain
  ``execute`` per operation, the namespace set once for the session (``set_config('pgmem.namespace', ns,
  false)``; pgmem sends it with every statement, in the same round trip). Not through a psycopg pipeline:
  on 2 cores with 32 processes such a run's backends spent 60-85% of their active time in
  ``Client/ClientRead`` between the pipeline's two statements (the client preempted mid-send). For
  ``claim``, which never rang nor notified, the control: pgmem / hand there is what pgmem's client path
  costs where notifications play no part. None for ``add``.
* ``notify``: what the doorbell replaced, the writers notifying in their own transactions. ``push`` and
  ``publish``: the statements by hand as for ``hand``, with the ``rung`` CTE replaced by the pre-0012
  ``wake`` CTE (``pg_notify('pgmem_queue', pgmem.notify_tag(ns, queue))`` per row), compared with
  ``hand``; ``add``: the pgmem API in a database where a ``BEFORE INSERT`` row trigger on
  ``pgmem.doorbell`` sends the notification the pre-0012 ``log_vector_changes`` sent, and drops the row,
  compared with ``floor``. A process listens as for pgmem (``--listen``). None for ``claim``.
* ``spread`` (``add``, ``push``, ``claim``, ``put``): the pgmem API, each process adding to a memory of its
  own (``team-<i>``, vectors on), pushing to a queue of its own (``jobs-<i>``), claiming from one
  (``work-<i>``, prefilled) or putting under a namespace path of its own (``("team", "agent<i>")``),
  against which one shared memory, queue or path is measured: what writers of one target wait for that
  writers of different ones do not (issue 38; pgmem / spread, target >= 0.8 at 32 processes).

Data and state: each run gets a fresh database cloned from a template (schema, the embedding model, the
memory ``team`` with vectors on, one subscriber per process; for ``claim`` the queue prefilled with
``--claim-items`` items, default about 6,000 per second of run per 2 cores). Every process does 10 untimed
operations (statements prepared, pools open) before the start signal. Messages are single lines of real
English text (~60 bytes). Costs per operation: push O(log n) (btree inserts), publish O(log n + s) for s
subscribers (one matches), add O(log n) plus, in the background, one HNSW insert per message (O(ef log n)),
claim O(log n) in the queue's length; the notification lock adds a serial section per committing writer
(its WAL flush), which is what grows with the number of processes.

Sampled during every run: ``pg_stat_activity`` every 5 ms by a process of its own: among client backends of
the run's database that are active (itself and ``pgmem-doorbell`` connections excluded) how many (busy),
how many wait on ``Lock``/``object`` and how many on any ``Lock``, with the wait events counted. Reported:
ops/s (all processes' operations over the window from the start signal to the stop signal, median of the
rounds), share = samples on ``Lock``/``object`` / busy samples (over the rounds), the share on any lock and
the commonest waits, pgmem / floor, the rows left in ``pgmem.doorbell`` and (``add``) in the embedding
outbox at the end. Targets of issue 32, printed, never asserted: the object share <= 5% for every operation
at 8 and 32 processes; pgmem's ops/s at 32 processes >= 0.8x the statements by hand's (``hand``: the
issue's floor), printed beside pgmem / ``floor`` (what the doorbell alone costs).
Writes ``benchmarks/results/writers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import re
import statistics
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

import pgmem
from benchmarks._common import write_json
from benchmarks.agents import LookupEmbedder, _with_db, bench_server, line, load_data
from pgmem import doorbell
from pgmem.ops import migrate
from pgmem.planning import statements
from pgmem.planning.rows import INSERT_COLUMNS, encode

NS = "bench"
OPS = ("push", "publish", "add", "claim", "put")
CONTENDERS = ("pgmem", "floor", "hand", "notify", "spread")
#: The contenders each operation has. claim never rang nor notified: pgmem's path against the statement by
#: hand is its control (what the client path costs where notifications play no part). add's ring is in a
#: trigger of the embedder's transaction: no statement by hand.
OP_CONTENDERS = {
    "push": CONTENDERS,
    "publish": CONTENDERS[:4],
    "add": ("pgmem", "floor", "notify", "spread"),
    "claim": ("pgmem", "hand", "spread"),
    "put": ("pgmem", "spread"),
}
PUSH_QUEUE, CLAIM_QUEUE, IDLE_QUEUE, MEMORY = "jobs", "work", "idle", "team"
STORE_PATH = ("team", "notes")  # the put op's LangGraph namespace (spread: ("team", "agent<i>"))
WARM = 10  # untimed operations of each process before the start signal
SAMPLE_S = 0.005
#: Issue 32's targets: the Lock/object share at these process counts, and pgmem's ops/s against the floor's.
TARGET_SHARE, TARGET_SHARE_AT, TARGET_RATIO, TARGET_RATIO_AT = 0.05, (8, 32), 0.8, 32
#: Issue 38's: adds to one memory >= 0.8x adds spread over as many memories as writers, at 32 writers; at 64
#: (16 cores) no wait event but the WAL's above 20% of busy samples, and adds/s at 64 >= at 16.
TARGET_SPREAD, TARGET_SPREAD_AT, TARGET_WAIT_SHARE, WAL_WAITS = 0.8, 32, 0.2, ("IO/WalSync", "LWLock/WALWrite")
#: Prefilled claim items per second of run, per 2 cores (this VM claims up to ~4k/s at batch 1).
CLAIM_PER_S_PER_2_CORES = 6_000

#: Runs of a statement by hand that failed with a deadlock before the next is let fail (as pgmem's claim).
DEADLOCK_RETRIES = 3

SET_SESSION_NAMESPACE = "SELECT set_config('pgmem.namespace', %s, false)"
_RUNG = re.compile(
    r"rung AS \(\s*INSERT INTO pgmem\.doorbell \(namespace, channel, name\)\s*"
    r"SELECT %\(ns\)s, 'pgmem_queue', (?P<name>.+?) FROM (?P<source>\w+)\s*RETURNING 1\s*\)",
    re.DOTALL,
)
_RUNG_COUNT = "(SELECT count(*) FROM rung)"

#: Triggers on pgmem.doorbell for the add op's floor (drop every ring) and its notify contender (notify as
#: the writer did before migration 0012, and drop the ring).
DROP_RINGS = """
CREATE FUNCTION public.bench_drop_ring() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END $$;
CREATE TRIGGER bench_drop_ring BEFORE INSERT ON pgmem.doorbell
    FOR EACH ROW EXECUTE FUNCTION public.bench_drop_ring()"""
NOTIFY_RINGS = """
CREATE FUNCTION public.bench_notify_ring() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.channel = 'pgmem_queue' THEN
        PERFORM pg_notify(NEW.channel, pgmem.notify_tag(NEW.namespace, NEW.name));
    ELSE
        PERFORM pg_notify(NEW.channel, json_build_array(pgmem.notify_tag(NEW.namespace, NEW.name), NEW.rev)::text);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_notify_ring BEFORE INSERT ON pgmem.doorbell
    FOR EACH ROW EXECUTE FUNCTION public.bench_notify_ring()"""

#: One sample of the run's busy client backends (the sampler and the doorbell's connections left out).
SAMPLE = """
SELECT count(*) AS busy,
       count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'object') AS object,
       count(*) FILTER (WHERE wait_event_type = 'Lock') AS lock,
       coalesce(array_agg(wait_event_type || '/' || wait_event) FILTER (WHERE wait_event IS NOT NULL), '{}')
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND state = 'active' AND datname = %(db)s
  AND pid <> pg_backend_pid() AND application_name IS DISTINCT FROM %(doorbell)s"""


# -- the statements by hand -----------------------------------------------------------------------------


def without_rung(text: str) -> str:
    """``text`` with its ``rung`` CTE (the doorbell insert) removed and its count replaced by 0."""
    out, n = re.subn(r",\s*" + _RUNG.pattern, "", text, flags=re.DOTALL)
    if n != 1 or _RUNG_COUNT not in out:
        raise RuntimeError("the statement's rung CTE was not found: update benchmarks/writers.py")
    return out.replace(_RUNG_COUNT, "0::bigint")


def notifying(text: str) -> str:
    """``text`` with its ``rung`` CTE replaced by the pre-0012 ``wake`` CTE: pg_notify per row, at commit."""
    wake = (
        r"rung AS (\n    SELECT pg_notify('pgmem_queue', pgmem.notify_tag(%(ns)s, \g<name>))::text AS sent"
        r" FROM \g<source>\n)"
    )
    out, n = _RUNG.subn(wake, text)
    if n != 1:
        raise RuntimeError("the statement's rung CTE was not found: update benchmarks/writers.py")
    return out


def by_hand(contender: str) -> dict[str, str]:
    """The queue statements the floor (no ring) or the notify contender (pg_notify) issues."""
    q = statements.load("queues")
    change = without_rung if contender == "hand" else notifying
    claim = sql.SQL(q["ack_claim"]).format(limit=sql.Literal(1)).as_string(None)
    return {"push": change(q["push"]), "publish": change(q["publish"]), "claim": claim}


def _int_array(values: list[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


class HandWriter:
    """One process's statements by hand: psycopg, autocommit, prepared, the namespace set for the session."""

    def __init__(self, dsn: str, contender: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(SET_SESSION_NAMESPACE, (NS,))
        self.stmts = by_hand(contender)
        self.held: list[tuple[int, int]] = []

    def run(self, stmt: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        for _ in range(DEADLOCK_RETRIES):  # as pgmem's claim(ack=) does (pgmem/_async/claims.py)
            try:
                return self.conn.execute(stmt, {"ns": NS, **params}, prepare=True, binary=True).fetchall()
            except psycopg.errors.DeadlockDetected:
                continue
        return self.conn.execute(stmt, {"ns": NS, **params}, prepare=True, binary=True).fetchall()

    def push(self, message: pgmem.Message) -> None:
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        params = {"queue": PUSH_QUEUE, "priority": 0, "delay": 0.0, "max_attempts": 5, **row, "dedup_key": None}
        self.run(self.stmts["push"], params)

    def publish(self, message: pgmem.Message) -> None:
        row = dict(zip(INSERT_COLUMNS, encode(message), strict=True))
        self.run(self.stmts["publish"], {"memory": MEMORY, "priority": 0, **row})

    def claim(self, worker: str) -> bool:
        ids, attempts = [i for i, _ in self.held], [a for _, a in self.held]
        params = {"queue": CLAIM_QUEUE, "lease": 30.0, "worker": worker, "ids": _int_array(ids),
                  "attempts": _int_array(attempts)}  # fmt: skip
        rows = self.run(self.stmts["claim"], params)
        self.held = [(r[0], r[3]) for r in rows if r[0] is not None]  # QueueItemRow: id, ..., attempts
        return bool(self.held)

    def close(self) -> None:
        self.conn.close()


# -- the processes ----------------------------------------------------------------------------------------


def _message(texts: list[str], index: int, i: int, n: int, tag: str) -> pgmem.Message:
    row = (index * 4_999 + i * 7) % len(texts)
    return pgmem.Message(
        id=f"{tag}-{index}-{i}", content=line(texts, row), role="bench", cause_by="Bench",
        sent_from=f"agent{index}", send_to={f"agent{(index + 1) % n}"},
    )  # fmt: skip


def writer_step(
    op: str, contender: str, dsn: str, index: int, n: int, texts: list[str], embedder: LookupEmbedder
) -> tuple[Callable[[int], bool], Callable[[], None]]:
    """The operation one process loops (``step(i)`` returns False when the claim queue ran dry) and its close."""
    tag = uuid.uuid4().hex[:8]
    worker = f"bench-{os.getpid()}"
    api = contender in ("pgmem", "floor", "spread") or op == "add"
    # spread: each process adds to a memory (pushes to, claims from a queue) of its own, what one shared
    # memory (queue) is measured against (issue 38: no row every writer of one memory or queue waits for)
    spread = contender == "spread"
    memory = f"{MEMORY}-{index}" if spread else MEMORY
    push_queue = f"{PUSH_QUEUE}-{index}" if spread else PUSH_QUEUE
    claim_queue = f"{CLAIM_QUEUE}-{index}" if spread else CLAIM_QUEUE
    if op == "put":
        return _store_step(dsn, index, texts, embedder, ("team", f"agent{index}") if spread else STORE_PATH, tag)
    if api:
        client = pgmem.connect(
            dsn, namespace=NS, max_size=2 if op == "add" else 1, migrate=False,
            embedder=embedder if op == "add" else None,
        )  # fmt: skip
        if contender == "floor" and op in ("push", "publish"):
            # pgmem's own path, its statement without the ring: what the doorbell costs a writer, alone
            named = client.queues.queries
            client.queues.queries = {**named, op: without_rung(named[op])}
        held: list[Any] = []

        def step(i: int) -> bool:
            nonlocal held
            if op == "push":
                client.queues.push(push_queue, _message(texts, index, i, n, tag))
            elif op == "publish":
                client.queues.publish(MEMORY, _message(texts, index, i, n, tag))
            elif op == "add":
                client.messages.add(memory, _message(texts, index, i, n, tag))
            else:
                held = client.queues.claim(claim_queue, n=1, worker=worker, ack=held or None)
                return bool(held)
            return True

        return step, client.close
    hand = HandWriter(dsn, contender)

    def hand_step(i: int) -> bool:
        if op == "push":
            hand.push(_message(texts, index, i, n, tag))
        elif op == "publish":
            hand.publish(_message(texts, index, i, n, tag))
        else:
            return hand.claim(worker)
        return True

    return hand_step, hand.close


def _langgraph_index(embedder: LookupEmbedder) -> Any:
    return {"dims": embedder.dimension, "embed": embedder, "fields": ["text"], "model": embedder.model}


def _store_step(
    dsn: str, index: int, texts: list[str], embedder: LookupEmbedder, path: tuple[str, ...], tag: str
) -> tuple[Callable[[int], bool], Callable[[], None]]:
    """The put op: LangGraph's store on a client of one connection, a new key (one item, one vector) a call."""
    from pgmem.integrations.langgraph import PgmemStore

    client = pgmem.connect(dsn, namespace=NS, max_size=1, migrate=False)
    store = PgmemStore(client, index=_langgraph_index(embedder))

    def step(i: int) -> bool:
        store.put(path, f"{tag}-{index}-{i}", {"text": line(texts, (index * 4_999 + i * 7) % len(texts))})
        return True

    return step, client.close


def writer_process(
    op: str,
    contender: str,
    dsn: str,
    index: int,
    n: int,
    texts: list[str],
    embedder: LookupEmbedder,
    ctl: dict[str, Any],
) -> None:
    """A forked writer: connect, WARM untimed operations, say ready, loop until stop, report, wait to exit."""
    try:
        step, close = writer_step(op, contender, dsn, index, n, texts, embedder)
        for i in range(WARM):
            step(i)
        ctl["ready"].put(index)
        ctl["start"].wait()
        ops = dry = 0
        stop = ctl["stop"]
        while not stop.is_set():
            if step(WARM + ops):
                ops += 1
            else:
                dry += 1
                time.sleep(0.001)
        ctl["done"].put({"index": index, "ops": ops, "dry": dry})
        ctl["finish"].wait()
        close()
    except BaseException:  # noqa: BLE001 - re-reported: the parent must not wait for a report that never comes
        ctl["done"].put({"index": index, "error": traceback.format_exc()})
        ctl["ready"].put(-1)


def holder_process(dsn: str, ctl: dict[str, Any]) -> None:
    """A process waiting on an unrelated queue: it holds a doorbell, elected (the only candidate), draining."""
    try:
        with pgmem.connect(dsn, namespace=NS, max_size=1, migrate=False) as client:
            client.queues.wait(IDLE_QUEUE, timeout=0.01)
            bell = client.queues._doorbell
            give_up = time.monotonic() + 10
            while bell is not None and not bell.leading and time.monotonic() < give_up:
                time.sleep(0.01)
            if bell is None or not bell.leading:
                raise RuntimeError("the waiting process holds no elected doorbell after 10 s")
            ctl["ready"].put(0)
            while not ctl["finish"].is_set():
                client.queues.wait(IDLE_QUEUE, timeout=0.5, poll_interval=0.5)
            stats = bell.stats if bell is not None else doorbell.DoorbellStats()
            ctl["holder"].put({"rounds": stats.rounds, "notifications": stats.notifications})
    except BaseException:  # noqa: BLE001 - reported
        ctl["holder"].put({"error": traceback.format_exc()})
        ctl["ready"].put(-2)


def sampler_process(dsn: str, db: str, ctl: dict[str, Any]) -> None:
    """pg_stat_activity every SAMPLE_S from the start signal to the stop signal (see SAMPLE)."""
    try:
        with psycopg.connect(dsn, autocommit=True, application_name="pgmem-bench-sampler") as conn:
            conn.execute(SAMPLE, {"db": db, "doorbell": doorbell.APPLICATION_NAME}, prepare=True)
            ctl["ready"].put(0)
            ctl["start"].wait()
            samples = busy = obj = lock = 0
            waits: Counter[str] = Counter()
            tick = time.monotonic()
            while not ctl["stop"].is_set():
                row = conn.execute(SAMPLE, {"db": db, "doorbell": doorbell.APPLICATION_NAME}, prepare=True).fetchone()
                if row is not None:
                    samples += 1
                    busy, obj, lock = busy + row[0], obj + row[1], lock + row[2]
                    waits.update(row[3])
                tick += SAMPLE_S
                time.sleep(max(0.0, tick - time.monotonic()))
            ctl["sampler"].put({"samples": samples, "busy": busy, "object": obj, "lock": lock, "waits": dict(waits)})
    except BaseException:  # noqa: BLE001 - reported
        ctl["sampler"].put({"error": traceback.format_exc()})
        ctl["ready"].put(-3)


# -- databases --------------------------------------------------------------------------------------------


def _drop(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _create(admin_dsn: str, name: str, template: str | None = None) -> str:
    _drop(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
        conn.execute(stmt)
    return _with_db(admin_dsn, name)


def prepare_templates(
    admin_dsn: str, ops: list[str], counts: list[int], claim_items: int, texts: list[str], embedder: LookupEmbedder
) -> dict[str, str]:
    """``{op: template database}``: the schema, the memory with its model, the subscribers; and for claim
    the queue prefilled (a template of its own, so that the other runs do not copy its items), and the
    spread contender's queues: queue ``work-<i>`` holds ``claim_items`` / the fewest processes that use it,
    so that every run's processes share at least ``claim_items``."""
    processes = max(counts)
    base = f"pgmem_writers_{os.getpid()}"
    dsn = _create(admin_dsn, base)
    migrate.upgrade(dsn)
    with pgmem.connect(dsn, namespace=NS, max_size=1, migrate=False, embedder=embedder) as client:
        client.vectors.enable(MEMORY)
        if "add" in ops:
            for a in range(processes):
                client.vectors.enable(f"{MEMORY}-{a}")
        for a in range(processes):
            client.queues.subscribe(f"agent{a}")
        client.vectors.flush()
        if "put" in ops:  # the item vectors' model and HNSW index, built once here rather than by every run
            from pgmem.integrations.langgraph import PgmemStore

            PgmemStore(client, index=_langgraph_index(embedder)).setup()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    out = {op: base for op in ops if op != "claim"}
    if "claim" in ops:
        name = f"{base}_claim"
        claim_dsn = _create(admin_dsn, name, base)
        fills = {CLAIM_QUEUE: claim_items}
        for a in range(processes):
            fills[f"{CLAIM_QUEUE}-{a}"] = claim_items // min(k for k in counts if k > a)
        with pgmem.connect(claim_dsn, namespace=NS, max_size=1, migrate=False) as client:
            for queue, items in fills.items():
                for lo in range(0, items, 5_000):
                    batch = [
                        pgmem.Message(content=line(texts, i % len(texts)), role="bench")
                        for i in range(lo, min(items, lo + 5_000))
                    ]
                    client.queues.push_many(queue, batch)
        with psycopg.connect(claim_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgmem.doorbell")  # the fill's rings: nobody was listening
            conn.execute("VACUUM ANALYZE")
        out["claim"] = name
    return out


@contextlib.contextmanager
def run_database(admin_dsn: str, template: str, op: str, contender: str) -> Iterator[tuple[str, str]]:
    """A fresh clone of ``template`` for one run (with the add op's doorbell trigger), dropped after it."""
    name = f"{template}_run"
    dsn = _create(admin_dsn, name, template)
    try:
        if op == "add" and contender != "pgmem":
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(DROP_RINGS if contender == "floor" else NOTIFY_RINGS)
        yield dsn, name
    finally:
        _drop(admin_dsn, name)


# -- one run --------------------------------------------------------------------------------------------


def run_once(
    op: str,
    contender: str,
    admin_dsn: str,
    template: str,
    n: int,
    seconds: float,
    listen: bool,
    texts: list[str],
    embedder: LookupEmbedder,
) -> dict[str, Any]:
    """``n`` writer processes looping ``op`` for ``seconds`` in a fresh database, the sampler beside them."""
    with run_database(admin_dsn, template, op, contender) as (dsn, db):
        ctx = mp.get_context("fork")  # the children share the parent's imports and the vectors
        ctl: dict[str, Any] = {
            "ready": ctx.Queue(),
            "done": ctx.Queue(),
            "sampler": ctx.Queue(),
            "holder": ctx.Queue(),
            "start": ctx.Event(),
            "stop": ctx.Event(),
            "finish": ctx.Event(),
        }
        holder = listen and contender not in ("floor", "hand")
        procs = [ctx.Process(target=sampler_process, args=(dsn, db, ctl))]
        if holder:
            procs.append(ctx.Process(target=holder_process, args=(dsn, ctl)))
        procs += [
            ctx.Process(target=writer_process, args=(op, contender, dsn, i, n, texts, embedder, ctl)) for i in range(n)
        ]
        for p in procs:
            p.start()
        reports: list[dict[str, Any]] = []
        sampled: dict[str, Any] = {}
        held: dict[str, Any] = {}
        try:
            for _ in procs:
                if ctl["ready"].get(timeout=600) < 0:
                    break
            time.sleep(0.2)
            load_before = os.getloadavg()
            t0 = time.perf_counter()
            ctl["start"].set()
            time.sleep(seconds)
            ctl["stop"].set()
            elapsed = time.perf_counter() - t0
            load_after = os.getloadavg()
            reports = [ctl["done"].get(timeout=600) for _ in range(n)]
            sampled = ctl["sampler"].get(timeout=60)
        finally:
            ctl["stop"].set()
            ctl["finish"].set()
            if holder:
                with contextlib.suppress(Exception):
                    held = ctl["holder"].get(timeout=30)
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
                    p.join()
        with psycopg.connect(dsn, autocommit=True) as conn:
            left = conn.execute("SELECT count(*) FROM pgmem.doorbell").fetchone()
            outbox = conn.execute("SELECT count(*) FROM pgmem.embedding_outbox").fetchone()
            # the writers have exited: their statistics are flushed
            deadlocks = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (db,)).fetchone()
    errors = [r["error"] for r in (*reports, sampled, held) if "error" in r]
    if errors:
        raise RuntimeError(f"{op} / {contender} with {n} processes: a process failed:\n{errors[0]}")
    total = sum(r["ops"] for r in reports)
    return {
        "ops": total,
        "elapsed_s": round(elapsed, 3),
        "ops_per_s": round(total / elapsed, 1),
        "dry": sum(r["dry"] for r in reports),
        "sampler": sampled,
        "doorbell_rows_left": None if left is None else int(left[0]),
        "outbox_left": None if outbox is None else int(outbox[0]),
        "deadlocks": None if deadlocks is None else int(deadlocks[0]),
        "holder": held or None,
        "load_avg_1m": [round(load_before[0], 2), round(load_after[0], 2)],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One contender at one op and process count over its rounds."""
    busy = sum(r["sampler"]["busy"] for r in runs)
    waits: Counter[str] = Counter()
    for r in runs:
        waits.update(r["sampler"]["waits"])
    return {
        "ops_per_s": round(statistics.median(r["ops_per_s"] for r in runs), 1),
        "runs_ops_per_s": [r["ops_per_s"] for r in runs],
        "samples": sum(r["sampler"]["samples"] for r in runs),
        "busy_per_sample": round(busy / max(1, sum(r["sampler"]["samples"] for r in runs)), 2),
        "lock_object_share": round(sum(r["sampler"]["object"] for r in runs) / busy, 4) if busy else None,
        "lock_share": round(sum(r["sampler"]["lock"] for r in runs) / busy, 4) if busy else None,
        "waits": {k: round(v / busy, 4) for k, v in waits.most_common()} if busy else {},
        "dry": sum(r["dry"] for r in runs),
        "doorbell_rows_left": [r["doorbell_rows_left"] for r in runs],
        "outbox_left": [r["outbox_left"] for r in runs],
        "deadlocks": [r["deadlocks"] for r in runs],
        "holder": [r["holder"] for r in runs if r["holder"]],
        "load_avg_1m": [la for r in runs for la in r["load_avg_1m"]],
    }


# -- output ---------------------------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:.1%}"


def _top_waits(waits: dict[str, float], k: int = 3) -> str:
    return ", ".join(f"{w} {s:.0%}" for w, s in list(waits.items())[:k])


def targets(points: list[dict[str, Any]]) -> list[str]:
    out = []
    for p in points:
        pg = p.get("pgmem")
        if pg is None:
            continue
        where = f"{p['op']} at {p['processes']} processes"
        if p["processes"] in TARGET_SHARE_AT and pg["lock_object_share"] is not None:
            verdict = "met" if pg["lock_object_share"] <= TARGET_SHARE else "MISSED"
            out.append(f"{where}: Lock/object share {_pct(pg['lock_object_share'])} (target <= 5%): {verdict}")
        if p["processes"] == TARGET_SPREAD_AT and p.get("pgmem/spread") is not None:
            verdict = "met" if p["pgmem/spread"] >= TARGET_SPREAD else "MISSED"
            what, whats = {"add": ("memory", "memories"), "put": ("path", "paths")}.get(p["op"], ("queue", "queues"))
            out.append(
                f"{where}: one {what} {pg['ops_per_s']:.0f} ops/s, {p['pgmem/spread']:.2f}x spread over "
                f"{p['processes']} {whats} ({p['spread']['ops_per_s']:.0f}) (target >= 0.8x): {verdict}"
            )
        if p["op"] == "add" and p["processes"] >= 64:
            worst = next(((w, v) for w, v in pg["waits"].items() if w not in WAL_WAITS), None)
            if worst is not None:
                verdict = "met" if worst[1] <= TARGET_WAIT_SHARE else "MISSED"
                out.append(
                    f"{where}: commonest wait but the WAL's {worst[0]} {_pct(worst[1])} (target <= 20%): {verdict}"
                )
            at16 = next((q for q in points if q["op"] == "add" and q["processes"] == 16 and "pgmem" in q), None)
            if at16 is not None:
                verdict = "met" if pg["ops_per_s"] >= at16["pgmem"]["ops_per_s"] else "MISSED"
                out.append(
                    f"{where}: {pg['ops_per_s']:.0f} adds/s against {at16['pgmem']['ops_per_s']:.0f} at 16 "
                    f"(target >=): {verdict}"
                )
        # The floor is the statements by hand (hand); pgmem's own path without the ring (floor) says
        # what the doorbell alone costs.
        for against, what in (("hand", "the statements by hand"), ("floor", "pgmem's path without the ring")):
            ratio = p.get(f"pgmem/{against}")
            if p["processes"] == TARGET_RATIO_AT and ratio is not None:
                verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
                out.append(
                    f"{where}: {pg['ops_per_s']:.0f} ops/s, {ratio:.2f}x {what} "
                    f"({p[against]['ops_per_s']:.0f}) (target >= 0.8x): {verdict}"
                )
    return out


def print_report(console: Console, results: dict[str, Any]) -> None:
    points = results["points"]
    shown = [c for c in CONTENDERS if any(c in p for p in points)]
    table = Table(
        title=f"writers: ops/s, median of {results['rounds']} round(s) of {results['seconds']} s "
        f"({results['cpus']} cores; floor: pgmem's path with no notification at all; hand: by psycopg)"
    )
    ratios = ("pgmem/floor", "pgmem/hand", "notify/hand", "notify/floor", "pgmem/spread")
    for col in ("op", "processes", *shown, *ratios, "doorbell rows left (pgmem)"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for p in points:
        cells = [p["op"], str(p["processes"])]
        cells += [f"{p[c]['ops_per_s']:.0f}" if c in p else "" for c in shown]
        cells += [f"{p[k]:.2f}" if p.get(k) is not None else "" for k in ratios]
        cells.append(",".join(str(v) for v in p["pgmem"]["doorbell_rows_left"]) if "pgmem" in p else "")
        table.add_row(*cells)
    console.print(table)
    table = Table(
        title="busy client backends waiting: on Lock/object / on any Lock (sampled every "
        f"{results['sample_interval_ms']:g} ms), and the commonest waits of pgmem's"
    )
    waits = tuple(f"{c}'s commonest waits" for c in ("pgmem", "spread") if c in shown)
    for col in ("op", "processes", *shown, "busy (pgmem)", *waits):
        table.add_column(col, justify="left" if col == "op" or col in waits else "right")
    for p in points:
        cells = [p["op"], str(p["processes"])]
        cells += [f"{_pct(p[c]['lock_object_share'])} / {_pct(p[c]['lock_share'])}" if c in p else "" for c in shown]
        cells.append(f"{p['pgmem']['busy_per_sample']:.1f}" if "pgmem" in p else "")
        cells += [_top_waits(p[c]["waits"], 4) if c in p else "" for c in ("pgmem", "spread") if c in shown]
        table.add_row(*cells)
    console.print(table)
    for verdict in results["targets"]:
        console.print(verdict)


# -- main -----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    default_counts = "1,8,32,64" if (os.cpu_count() or 1) >= 16 else "1,8,32"
    parser.add_argument("--processes", default=default_counts, help=f"process counts (default {default_counts})")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=1, help="runs per contender, op and process count")
    parser.add_argument("--ops", default=",".join(OPS), help=f"subset of {','.join(OPS)}")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"subset of {','.join(CONTENDERS)}")
    parser.add_argument(
        "--listen",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a process waits on a queue during pgmem's and notify's runs (the doorbell drains)",
    )
    parser.add_argument("--claim-items", type=int, default=None, help="items prefilled for claim (default: auto)")
    parser.add_argument("--quick", action="store_true", help="1 and 8 processes, 3 s")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/writers.json"))
    args = parser.parse_args()
    counts = [1, 8] if args.quick else [int(n) for n in args.processes.split(",") if n.strip()]
    seconds = 3.0 if args.quick else args.seconds
    ops = [o for o in args.ops.split(",") if o]
    contenders = [c for c in args.contenders.split(",") if c]
    if unknown := set(ops) - set(OPS):
        parser.error(f"unknown ops {sorted(unknown)}")
    if unknown := set(contenders) - set(CONTENDERS):
        parser.error(f"unknown contenders {sorted(unknown)}")
    cores = os.cpu_count() or 2
    claim_items = args.claim_items or int(max(20_000, CLAIM_PER_S_PER_2_CORES * seconds * max(1, cores // 2)))
    console = Console(width=None if Console().is_terminal else 160)
    texts, embedder = load_data()
    results: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "seconds": seconds,
        "rounds": args.rounds,
        "cpus": cores,
        "listen": args.listen,
        "claim_items": claim_items,
        "sample_interval_ms": SAMPLE_S * 1000,
    }
    points: list[dict[str, Any]] = []
    with bench_server(args.dsn, max(counts)) as admin_dsn:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            results["server"] = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN "
                    "('server_version', 'synchronous_commit', 'fsync', 'max_connections', 'wal_sync_method')"
                ).fetchall()
            )
        t0 = time.perf_counter()
        templates = prepare_templates(admin_dsn, ops, counts, claim_items, texts, embedder)
        console.print(f"templates ready in {time.perf_counter() - t0:.1f} s ({claim_items:,} claim items)")
        try:
            for op in ops:
                chosen = [c for c in OP_CONTENDERS[op] if c in contenders]
                for i, n in enumerate(counts):
                    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in chosen}
                    for r in range(args.rounds):
                        order = chosen if (i + r) % 2 == 0 else chosen[::-1]
                        for contender in order:
                            run = run_once(
                                op, contender, admin_dsn, templates[op], n, seconds, args.listen, texts, embedder
                            )
                            runs[contender].append(run)
                            s = run["sampler"]
                            busy = s["busy"] or 1
                            console.print(
                                f"{op:<7} {n:>3} processes {contender:<6} round {r + 1}:"
                                f" {run['ops_per_s']:>8.1f} ops/s,"
                                f" object {s['object'] / busy:.1%}, any lock {s['lock'] / busy:.1%},"
                                f" busy {s['busy'] / max(1, s['samples']):.1f}/sample, doorbell left"
                                f" {run['doorbell_rows_left']}, outbox {run['outbox_left']},"
                                f" deadlocks {run['deadlocks']}" + (f", dry {run['dry']}" if run["dry"] else "")
                            )
                    point: dict[str, Any] = {"op": op, "processes": n, **{c: summarize(v) for c, v in runs.items()}}
                    notify_base = "hand" if "hand" in point else "floor"  # notify by hand where there is one
                    for c, base in (
                        ("pgmem", "floor"),
                        ("pgmem", "hand"),
                        ("notify", notify_base),
                        ("pgmem", "spread"),
                    ):
                        if c in point and base in point and point[base]["ops_per_s"]:
                            point[f"{c}/{base}"] = round(point[c]["ops_per_s"] / point[base]["ops_per_s"], 2)
                    if any(point[c]["dry"] for c in runs):
                        console.print(f"warning: {op} ran dry at {n} processes: raise --claim-items")
                    points.append(point)
        finally:
            for name in sorted(set(templates.values()), reverse=True):  # the claim template first (a clone)
                _drop(admin_dsn, name)
    results["points"] = points
    results["targets"] = targets(points)
    write_json(args.out, results)
    print_report(console, results)
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
