"""Queues: pgmem against pgqueuer and a raw SKIP LOCKED loop in psycopg, on the same server, in one run.

    python -m benchmarks.queues            # full run (includes a 180 s vacuum-blocking phase)
    python -m benchmarks.queues --quick    # smoke run (20 s vacuum block, fewer jobs)

1. Throughput of claim + acknowledge (jobs/s) for batch sizes 1, 10, 50 and 1, 4, 8 consumer processes,
   the queue pre-filled with --jobs items (default 10,000), or with enough for 100 batches per consumer
   where that is more (20,000 at 50 x 4, 40,000 at 50 x 8). Every system claims batches with FOR UPDATE
   SKIP LOCKED and acknowledges every job, same durability (synchronous_commit on, logged tables).
   Cost per job is O(log n) in the queue length for all of them.
   - pgmem: claim(n=batch, lease=30, ack=previous batch): acknowledging batch k (archived) and claiming
     batch k+1 is one statement, so one round trip and one commit per batch
   - pgmem-2rt: claim(n=batch, lease=30) then ack(items): two statements per batch, like the others
   - pgqueuer: Queries.dequeue(batch_size=batch) then Queries.log_jobs (moved to its log table)
   - raw: UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n) RETURNING, then DELETE
   No consumer reads the job's payload (pgmem items build their message on first read).
2. Push-to-wake-up latency: a consumer blocked in client.queues.wait(poll_interval=30) in another
   process; time from push returning to wait returning (``pgmem``), and from the commit of a caller's
   transaction that pushed (``pgmem_tx``: ``push(connection=conn)``, then ``COMMIT``). Writers do not
   notify: the consumer's process rings the doorbell (pgmem.doorbell), which polls committed rings every
   millisecond. Raw LISTEN/NOTIFY in psycopg beside it (``raw_notify``: the floor, a notification sent by
   the pusher itself). Quiet, then beside ``--busy`` CPU-bound processes (default 8).
3. Vacuum blocking: throughput in 10 s windows before, during and after a transaction held open (its
   snapshot keeps vacuum from removing dead queue rows), with the dead tuples it leaves behind.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

import pgmem
from benchmarks._common import bench_database, busy_processes, write_json

QUEUE = "bench"
RAW_DDL = """
CREATE TABLE IF NOT EXISTS raw_jobs (
    id bigserial PRIMARY KEY, priority int NOT NULL DEFAULT 0, payload text NOT NULL,
    available_at timestamptz NOT NULL DEFAULT now(), attempts int NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS raw_jobs_claim_idx ON raw_jobs (priority, id)"""
RAW_CLAIM = """
UPDATE raw_jobs SET attempts = attempts + 1, available_at = now() + interval '30 seconds'
WHERE id IN (SELECT id FROM raw_jobs WHERE available_at <= now() ORDER BY priority, id
             LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, payload, attempts"""
RAW_ACK = "DELETE FROM raw_jobs WHERE id = ANY(%s) AND attempts = ANY(%s)"
SYSTEMS = ("pgmem", "pgqueuer", "raw", "pgmem-2rt")
# Each consumer claims at least this many batches in a run. At 10,000 jobs, 8 consumers taking 50 at a time
# claimed 25 times each in a run of 0.2-0.3 s, and their first claims weighed on it: the first executions
# of a statement are parsed and planned, the next five planned again (Postgres's custom plans).
MIN_BATCHES_PER_CONSUMER = 100


# -- filling ----------------------------------------------------------------------------------------


def fill(system: str, dsn: str, jobs: int) -> None:
    """Queue ``jobs`` jobs for ``system``, from the same state for every run of every system: empty tables.

    The raw loop's jobs table is truncated; pgmem's queue, archive and messages and pgqueuer's queue and
    log are emptied too, so that no system carries the history of earlier runs (a full run fills the
    queues 90 times) and the order of the runs does not weigh on the results."""
    payloads = [f"job {i}: " + "x" * 100 for i in range(jobs)]
    if system.startswith("pgmem"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE pgmem.queue_items, pgmem.queue_archive_batches, pgmem.messages CASCADE")
        with pgmem.connect(dsn, namespace="bench") as client:
            for start in range(0, jobs, 5000):
                client.queues.push_many(QUEUE, [pgmem.Message(content=p) for p in payloads[start : start + 5000]])
    elif system == "raw":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE raw_jobs")
            with conn.cursor() as cur, cur.copy("COPY raw_jobs (payload) FROM STDIN") as copy:
                for p in payloads:
                    copy.write_row((p,))
    else:
        asyncio.run(_pgqueuer_fill(dsn, payloads))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


async def _pgqueuer_queries(dsn: str) -> Any:
    from pgqueuer.adapters.persistence.queries import Queries

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return conn, Queries.from_psycopg_connection(conn)


async def _pgqueuer_fill(dsn: str, payloads: list[str]) -> None:
    conn, q = await _pgqueuer_queries(dsn)
    await q.clear_queue()
    await conn.execute("TRUNCATE pgqueuer_log")
    for start in range(0, len(payloads), 5000):
        chunk = payloads[start : start + 5000]
        await q.enqueue([QUEUE] * len(chunk), [p.encode() for p in chunk], [0] * len(chunk))
    await conn.close()


# -- consumers (run in their own processes) -----------------------------------------------------------


def consumer(system: str, dsn: str, batch: int, ready: Any, start: Any, done: Any, finish: Any) -> None:
    """Connect (and, for pgmem, open the pool's connection), say so on ``ready``, wait for ``start``, claim
    and acknowledge until the queue is empty, put the count on ``done``, then wait for ``finish`` before
    closing and exiting: the clock stops at the last count, and no process's shutdown (closing its pool,
    the interpreter's final garbage collection of every module it imported) runs while others still
    work. Before, a consumer that ran out of jobs first shut down beside the ones still claiming."""
    count = 0
    if system == "pgmem":
        with pgmem.connect(dsn, namespace="bench", max_size=1) as client:
            q = client.queues
            q.depth(QUEUE)  # the pool's connection is open and configured before the clock starts
            ready.put(1)
            start.wait()
            items = q.claim(QUEUE, n=batch, lease=30)
            while items:
                count += len(items)
                items = q.claim(QUEUE, n=batch, lease=30, ack=items)
            done.put(count)
            finish.wait()
    elif system == "pgmem-2rt":
        with pgmem.connect(dsn, namespace="bench", max_size=1) as client:
            q = client.queues
            q.depth(QUEUE)
            ready.put(1)
            start.wait()
            while items := q.claim(QUEUE, n=batch, lease=30):
                q.ack(items)
                count += len(items)
            done.put(count)
            finish.wait()
    elif system == "raw":
        with psycopg.connect(dsn, autocommit=True) as conn:
            ready.put(1)
            start.wait()
            while rows := conn.execute(RAW_CLAIM, (batch,), prepare=True).fetchall():
                conn.execute(RAW_ACK, ([r[0] for r in rows], [r[2] for r in rows]), prepare=True)
                count += len(rows)
            done.put(count)
            finish.wait()
    else:
        asyncio.run(_pgqueuer_consume(dsn, batch, ready, start, done, finish))


async def _pgqueuer_consume(dsn: str, batch: int, ready: Any, start: Any, done: Any, finish: Any) -> None:
    from pgqueuer.ports.repository import EntrypointExecutionParameter

    conn, q = await _pgqueuer_queries(dsn)
    entrypoints = {QUEUE: EntrypointExecutionParameter(concurrency_limit=0)}
    manager = uuid.uuid4()
    count = 0
    ready.put(1)
    await asyncio.to_thread(start.wait)
    while jobs := await q.dequeue(batch, entrypoints, manager, None, timedelta(seconds=30)):
        await q.log_jobs([(job, "successful", None) for job in jobs])
        count += len(jobs)
    done.put(count)
    await asyncio.to_thread(finish.wait)
    await conn.close()


def throughput(system: str, dsn: str, consumers: int, batch: int, jobs: int) -> float:
    fill(system, dsn, jobs)
    ctx = mp.get_context("spawn")
    ready, start, done, finish = ctx.Queue(), ctx.Event(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=consumer, args=(system, dsn, batch, ready, start, done, finish)) for _ in range(consumers)
    ]
    for p in procs:
        p.start()
    # Every process has imported, connected and said so before the clock starts: a fixed pause was too
    # short for 8 processes importing on 2 cores, whose start-up then ran inside the measurement.
    for _ in procs:
        ready.get(timeout=300)
    time.sleep(0.2)
    t0 = time.perf_counter()
    start.set()
    total = sum(done.get(timeout=600) for _ in procs)
    elapsed = time.perf_counter() - t0
    finish.set()
    for p in procs:
        p.join()
    assert total == jobs, f"{system}: processed {total} of {jobs}"
    return jobs / elapsed


# -- wake-up latency ------------------------------------------------------------------------------------


def _waiter(dsn: str, samples: int, ready: Any, out: Any) -> None:
    with pgmem.connect(dsn, namespace="bench", max_size=1) as client:
        ready.set()
        for _ in range(samples):
            items = client.queues.wait("wake", timeout=30, poll_interval=30)
            received = time.time()
            client.queues.ack(items)
            out.put((items[0].message.content, received))


def _raw_listener(dsn: str, samples: int, ready: Any, out: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN raw_bench")
        ready.set()
        got = 0
        for n in conn.notifies():
            out.put((n.payload, time.time()))
            got += 1
            if got == samples:
                break


WAKE_KINDS = ("pgmem", "pgmem_tx", "raw_notify")


def wake_latency(dsn: str, samples: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    result: dict[str, Any] = {}
    for kind in WAKE_KINDS:
        ready, out = ctx.Event(), ctx.Queue()
        target = _raw_listener if kind == "raw_notify" else _waiter
        proc = ctx.Process(target=target, args=(dsn, samples, ready, out))
        proc.start()
        ready.wait(60)
        time.sleep(1.0)
        latencies = []
        rng = random.Random(3)
        with pgmem.connect(dsn, namespace="bench", max_size=1) as client, psycopg.connect(dsn, autocommit=True) as raw:
            for i in range(samples):
                time.sleep(rng.uniform(0.005, 0.02))
                if kind == "pgmem":
                    client.queues.push("wake", pgmem.Message(content=str(i)))
                elif kind == "pgmem_tx":
                    with client.transaction() as conn:
                        client.queues.push("wake", pgmem.Message(content=str(i)), connection=conn)
                else:
                    raw.execute("SELECT pg_notify('raw_bench', %s)", (str(i),))
                returned = time.time()
                payload, received = out.get(timeout=30)
                assert payload == str(i)
                latencies.append((received - returned) * 1e6)
        proc.join(timeout=30)
        latencies.sort()
        result[kind] = {
            "p50_us": round(latencies[len(latencies) // 2], 1),
            "p99_us": round(latencies[int(len(latencies) * 0.99) - 1], 1),
            "samples": samples,
        }
    return result


# -- vacuum blocking ------------------------------------------------------------------------------------


def _steady_producer(dsn: str, stop: Any) -> None:
    with pgmem.connect(dsn, namespace="bench", max_size=1) as client:
        while not stop.is_set():
            if client.queues.depth(QUEUE)["ready"] < 5000:
                client.queues.push_many(QUEUE, [pgmem.Message(content="v" * 100) for _ in range(500)])
            else:
                time.sleep(0.05)


def _steady_consumer(dsn: str, stop: Any, counter: Any) -> None:
    with pgmem.connect(dsn, namespace="bench", max_size=1) as client:
        while not stop.is_set():
            items = client.queues.claim(QUEUE, n=10, lease=30)
            if items:
                client.queues.ack(items)
                with counter.get_lock():
                    counter.value += len(items)
            else:
                time.sleep(0.01)


def vacuum_block(dsn: str, block_seconds: int, console: Console) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    counter = ctx.Value("q", 0)
    fill("pgmem", dsn, 5000)
    procs = [ctx.Process(target=_steady_producer, args=(dsn, stop))]
    procs += [ctx.Process(target=_steady_consumer, args=(dsn, stop, counter)) for _ in range(4)]
    for p in procs:
        p.start()
    window = 10.0
    windows: list[dict[str, Any]] = []
    mon = psycopg.connect(dsn, autocommit=True)

    def measure(phase: str) -> float:
        before = counter.value
        time.sleep(window)
        rate = (counter.value - before) / window
        dead = mon.execute(
            "SELECT n_dead_tup, pg_total_relation_size('pgmem.queue_items'),"
            " pg_relation_size('pgmem.queue_items_claim_idx'), autovacuum_count, vacuum_count"
            " FROM pg_stat_user_tables WHERE schemaname = 'pgmem' AND relname = 'queue_items'"
        ).fetchone()
        windows.append(
            {
                "phase": phase,
                "jobs_per_s": round(rate, 1),
                "dead_tuples": dead[0] if dead else None,
                "queue_items_bytes": dead[1] if dead else None,
                "claim_index_bytes": dead[2] if dead else None,
                "vacuums": (dead[3] + dead[4]) if dead else None,
            }
        )
        w = windows[-1]
        console.print(
            f"  {phase:>8}: {rate:8.0f} jobs/s, dead tuples {w['dead_tuples']}, table {w['queue_items_bytes']}"
            f" B, claim index {w['claim_index_bytes']} B, vacuums so far {w['vacuums']}"
        )
        return rate

    time.sleep(3)
    baseline = statistics.median(measure("baseline") for _ in range(3))
    blocker = psycopg.connect(dsn)
    blocker.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    blocker.execute("SELECT count(*) FROM pgmem.queue_items").fetchone()  # takes the snapshot
    blocked_rates = [measure("blocked") for _ in range(max(1, int(block_seconds // window)))]
    blocker.rollback()
    blocker.close()
    released_at = time.monotonic()
    recovery_windows = 0
    recovery_s = None
    after: list[float] = []
    # Until it is back at 90% of the baseline, then three more windows: recovered means it stays there.
    while len(after) < 12 and (recovery_s is None or len(after) < recovery_windows + 3):
        after.append(measure("released"))
        if recovery_s is None and after[-1] >= 0.9 * baseline:
            recovery_s = round(time.monotonic() - released_at, 1)
            recovery_windows = len(after)
    stop.set()
    for p in procs:
        p.join(timeout=30)
    mon.close()
    return {
        "window_s": window,
        "block_seconds": block_seconds,
        "baseline_jobs_per_s": round(baseline, 1),
        "worst_blocked_jobs_per_s": round(min(blocked_rates), 1),
        "drop": round(min(blocked_rates) / baseline, 3),
        "recovered_to_90pct_within_s": recovery_s,
        "released_jobs_per_s": [round(r, 1) for r in after],
        "windows": windows,
    }


# -- main -------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--vacuum-block-seconds", type=int, default=180)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/queues.json"))
    parser.add_argument("--points", default=None, help="throughput points only, e.g. 10x1,50x4 (batch x consumers)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"subset of {','.join(SYSTEMS)}")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--busy", type=int, default=8, help="wake-up latency again beside N busy processes (0: skip)")
    parser.add_argument("--skip-vacuum", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}")
    points = [] if args.skip_throughput else [(b, c) for b in (1, 10, 50) for c in (1, 4, 8)]
    if args.points:
        points = [(int(b), int(c)) for b, c in (p.split("x") for p in args.points.split(","))]
    jobs = 1000 if args.quick else args.jobs
    if args.quick:
        args.rounds = 1
    block = 20 if args.quick else args.vacuum_block_seconds
    console = Console()
    results: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "min_jobs_per_run": jobs,
        "rounds": args.rounds,
    }
    with bench_database(args.dsn) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(RAW_DDL)
            settings = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_commit', 'fsync')"
                ).fetchall()
            )
        asyncio.run(_install_pgqueuer(dsn))
        results["durability"] = settings
        grid = []
        for batch, consumers in points:
            per_run = jobs if args.quick else max(jobs, MIN_BATCHES_PER_CONSUMER * batch * consumers)
            row: dict[str, Any] = {"batch": batch, "consumers": consumers, "jobs": per_run}
            # Rounds interleave the systems in time: commit latency (fsync) on a shared VM drifts
            # over minutes, and each system should see the same drift. Median of the rounds.
            runs: dict[str, list[float]] = {s: [] for s in systems}
            for _ in range(args.rounds):
                for system in runs:
                    runs[system].append(throughput(system, dsn, consumers, batch, per_run))
            for system, values in runs.items():
                row[system] = round(statistics.median(values))
            row["runs"] = {system: [round(v) for v in values] for system, values in runs.items()}
            for system in systems[1:]:
                row[f"{systems[0]}/{system}"] = round(row[systems[0]] / row[system], 2)
            console.print({k: v for k, v in row.items() if k != "runs"})
            grid.append(row)
        results["throughput"] = grid
        if not args.skip_latency:
            console.print("wake-up latency …")
            samples = 100 if args.quick else 300
            results["wake_latency"] = wake_latency(dsn, samples)
            console.print(results["wake_latency"])
            if args.busy:
                console.print(f"wake-up latency beside {args.busy} busy processes …")
                with busy_processes(args.busy):
                    results["wake_latency_busy"] = {"busy processes": args.busy, **wake_latency(dsn, samples)}
                console.print(results["wake_latency_busy"])
        if not args.skip_vacuum:
            console.print(f"vacuum blocked for {block} s …")
            results["vacuum_block"] = vacuum_block(dsn, block, console)
    write_json(args.out, results)
    columns = ["batch", "consumers", "jobs", *systems, *(f"{systems[0]}/{s}" for s in systems[1:])]
    table = Table(title=f"claim + ack throughput, jobs/s (at least {jobs:,} jobs per run)")
    for col in columns:
        table.add_column(col, justify="right")
    for row in grid:
        table.add_row(*(str(row[c]) for c in columns))
    console.print(table)
    for part, label in (("wake_latency", "quiet"), ("wake_latency_busy", f"{args.busy} busy")):
        if w := results.get(part):
            console.print(
                f"wake-up p50/p99 ({label}): "
                + ", ".join(f"{kind} {w[kind]['p50_us']:.0f}/{w[kind]['p99_us']:.0f} us" for kind in WAKE_KINDS)
            )
    if v := results.get("vacuum_block"):
        console.print(
            f"vacuum block {block} s: baseline {v['baseline_jobs_per_s']} jobs/s, worst "
            f"{v['worst_blocked_jobs_per_s']} ({v['drop']:.0%}), recovered within "
            f"{v['recovered_to_90pct_within_s']} s"
        )
    console.print(f"written to {args.out}")


async def _install_pgqueuer(dsn: str) -> None:
    conn, q = await _pgqueuer_queries(dsn)
    if not await q.schema_is_installed():
        await q.install()
    await conn.close()


if __name__ == "__main__":
    main()
