"""A chaos soak (issue 34, item 8): every kind of fault of docs/reliability.md, one after another, under
seven worker processes that publish, push, claim + effect + ack, add, search (and compare a FAISS cache
with exact search) and put items.

The embedded server under a temporary ``PGMEM_HOME``; five workers connect through the stalling proxy
(``tests/faults/proxy.py``, in front of the server's unix socket), two straight to the embedded server
(their clients start it again when it dies: nothing else does). Each worker is a process of its own
(``tests/faults/soak_workers.py``: what each does and how it retries). The controller, over about 90 s:
terminates every worker backend (``pg_terminate_backend``), stalls the proxy for 2.5-4 s, shuts the server
down (a fast shutdown, SIGINT to its postmaster) and kills it once (SIGKILL), :data:`FAULTS` in that
order, each :data:`SPACING` s after every worker was back from the one before.

Targets: 0 acknowledged pushes or publishes lost, 0 effects duplicated (effect and ack in one transaction),
every acknowledged add in the memory exactly once, every acknowledged item put there, 0 untyped errors
(every error of a pgmem call a ``pgmem.errors.PgmemError``), the cache equal to exact search at the final
quiet check (and whenever compared during the soak), every worker back (a call begun after the fault's end
that succeeded) within :data:`RECOVERY_BOUND` s of the end of each fault. The figures go to stdout (``-s``) and to
``soak.json`` under the test's ``tmp_path``; docs/reliability.md quotes them. Nothing here depends on the
machine's speed: no throughput is asserted, and the bounds are generous.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgmem
from pgmem import doorbell
from pgmem.ops import server
from tests.faults.conftest import kill_tree
from tests.faults.proxy import Proxy, unix_socket_of
from tests.faults.soak_workers import ENV, FINAL_CHECKS, INBOX, NAMESPACE, QUEUE, SHARED, SUBSCRIBER

# About 2 minutes on the shared 2-core VM; the suite's 300 s timeout is too close on a busier machine.
pytestmark = [pytest.mark.fullsize, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]

#: (role, name, via): ``direct`` workers use the embedded server itself, and start it again when it dies.
WORKERS = [
    ("publisher", "pub0", "proxy"),
    ("publisher", "pub1", "direct"),
    ("consumer", "con0", "proxy"),
    ("tx-consumer", "con1", "proxy"),
    ("writer", "add0", "proxy"),
    ("items", "put0", "direct"),
    ("searcher", "find0", "proxy"),
]
FAULTS = [
    "terminate",
    "stall",
    "restart",
    "terminate",
    "stall",
    "kill",
    "terminate",
    "stall",
    "restart",
    "terminate",
    "stall",
    "terminate",
]
SPACING = (4.0, 6.0)  # seconds between every worker being back and the next fault
STALL = (2.5, 4.0)  # the proxy's stalls; the workers' calls time out after 2 s (soak_workers.TIMEOUT)
RECOVERY_BOUND = 30.0
START_BOUND = 120.0  # seven processes importing numpy and FAISS on a busy 2-core machine
SEED_MESSAGES = 30


def _owner_dsn(home: Path) -> str:
    status = server.status(home)
    assert status.running and status.dsn is not None, "the server is down"
    return status.dsn


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _server_back(home: Path, old_pid: int, bound: float) -> float:
    """Seconds until a new server (started by the direct workers' clients) answers a query."""
    t0 = time.monotonic()
    while True:
        status = server.status(home)
        if status.running and status.pid != old_pid and status.dsn is not None:
            try:
                with psycopg.connect(status.dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return time.monotonic() - t0
            except psycopg.OperationalError:
                pass  # still starting
        assert time.monotonic() - t0 < bound, "nobody started the server again"
        time.sleep(0.02)


class Controller:
    def __init__(self, home: Path, proxy: Proxy, rng: random.Random) -> None:
        self.home, self.proxy, self.rng = home, proxy, rng

    def terminate(self) -> dict[str, Any]:
        with psycopg.connect(_owner_dsn(self.home), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(  # the workers' backends, and the doorbell's (the searcher's cache rings it)
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'soak-%%' OR application_name = %s",
                (doorbell.APPLICATION_NAME,),
            ).fetchall()
        return {"ended": time.time(), "terminated": sum(1 for (ok,) in rows if ok)}

    def stall(self) -> dict[str, Any]:
        seconds = self.rng.uniform(*STALL)
        self.proxy.mode = "stall"
        time.sleep(seconds)
        self.proxy.mode = "pass"
        return {"ended": time.time(), "seconds": round(seconds, 2)}

    def restart(self) -> dict[str, Any]:
        """A fast shutdown (SIGINT to the postmaster, what ``pg_ctl stop -m fast`` sends), ended once the
        postmaster exited; pgmem's clients start the server again. Not ``pg_ctl`` itself: it waits while
        ``postmaster.pid`` names a live process, and the new server's may already be there."""
        pid = server.status(self.home).pid
        assert pid is not None
        os.kill(pid, signal.SIGINT)
        give_up = time.monotonic() + RECOVERY_BOUND
        while not _gone(pid):
            assert time.monotonic() < give_up, "the server did not shut down"
            time.sleep(0.02)
        ended = time.time()
        return {"ended": ended, "server_back": round(_server_back(self.home, pid, RECOVERY_BOUND), 2)}

    def kill(self) -> dict[str, Any]:
        pid = server.status(self.home).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        ended = time.time()
        return {"ended": ended, "server_back": round(_server_back(self.home, pid, RECOVERY_BOUND), 2)}


def _beat(run: Path, name: str) -> float:
    try:
        return float((run / f"{name}.beat").read_text())
    except (OSError, ValueError):
        return 0.0


def _wait_back(run: Path, since: float, bound: float) -> None:
    """Until every worker made a successful call begun after ``since`` (at most ``bound`` s: asserted later)."""
    give_up = time.monotonic() + bound
    while time.monotonic() < give_up and any(_beat(run, name) <= since for _, name, _ in WORKERS):
        time.sleep(0.05)


def _wait_exit(procs: dict[str, subprocess.Popen[bytes]], names: list[str], run: Path, bound: float) -> None:
    give_up = time.monotonic() + bound
    for name in names:
        try:
            procs[name].wait(max(1.0, give_up - time.monotonic()))
        except subprocess.TimeoutExpired:
            (run / "give-up").touch()  # calls still failing are abandoned (and reported)
            procs[name].wait(30)


def _until(what: str, bound: float, check: Callable[[], bool]) -> None:
    give_up = time.monotonic() + bound
    while not check():
        assert time.monotonic() < give_up, what
        time.sleep(0.2)


def _journal(run: Path) -> dict[str, list[tuple[str, str]]]:
    """Per kind (P publish, Q push, E effect+ack, A add, I item put): (worker, id) of every call that returned."""
    found: dict[str, list[tuple[str, str]]] = {}
    for _, name, _ in WORKERS:
        path = run / f"{name}.journal"
        for line in path.read_text().splitlines() if path.exists() else []:
            kind, _, ident = line.partition(" ")
            found.setdefault(kind, []).append((name, ident))
    return found


def test_chaos_soak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(tempfile.mkdtemp(prefix="pgmem-soak-"))  # short: the server's unix socket lives under it
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("PGMEM_HOME", str(home))
    monkeypatch.delenv("PGMEM_DSN", raising=False)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    proxy = Proxy(unix_socket_of(server.pgdata_dir(home)))
    started = time.monotonic()
    try:
        with pgmem.connect(namespace=NAMESPACE) as client:  # starts the server and migrates
            client.vectors.enable(SHARED)
            seeds = [
                pgmem.Message(id=f"seed-{i}", content=f"seed {i} of the shared memory") for i in range(SEED_MESSAGES)
            ]
            client.messages.add_many(SHARED, seeds)
            client.vectors.flush()
            client.queues.subscribe(SUBSCRIBER)
        with psycopg.connect(_owner_dsn(home), autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE soak_effects (message_id text NOT NULL, worker text NOT NULL, "
                "at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            conn.execute("GRANT SELECT, INSERT ON soak_effects TO pgmem_app")
        dsn = make_conninfo(
            host="127.0.0.1",
            port=str(proxy.port),
            user=server.AGENT_ROLE,
            dbname=server.DATABASE,
            sslmode="disable",
            gssencmode="disable",
        )
        env = {**os.environ, "PGMEM_HOME": str(home), "SOAK_DSN": dsn}
        env.pop("PGMEM_DSN", None)
        for role, name, via in WORKERS:
            with open(run / f"{name}.log", "wb") as log:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "tests.faults.soak_workers", role, name, str(run), via],
                    cwd=ROOT,
                    env={**env, "PGAPPNAME": f"soak-{name}"},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        _until("the workers did not start", START_BOUND, lambda: all(_beat(run, n) > 0 for _, n, _ in WORKERS))
        chaos_began = time.time()

        # -- the faults -------------------------------------------------------------------------------
        rng = random.Random(34)
        controller = Controller(home, proxy, rng)
        faults: list[dict[str, Any]] = []
        for kind in FAULTS:
            time.sleep(rng.uniform(*SPACING))
            for name, proc in procs.items():
                assert proc.poll() is None, f"worker {name} ended during the soak: {(run / f'{name}.log').read_text()}"
            begun = time.time()
            fault = {"kind": kind, "begun": begun, **getattr(controller, kind)()}
            faults.append(fault)
            _wait_back(run, fault["ended"], RECOVERY_BOUND + 5)  # the figures need each fault's recovery alone
        chaos_ended = time.time()

        # -- stop and drain ---------------------------------------------------------------------------
        (run / "stop").touch()
        producers = [n for role, n, _ in WORKERS if role in ("publisher", "writer", "items")]
        _wait_exit(procs, producers, run, 90)
        with pgmem.connect(namespace=NAMESPACE) as client:
            client.vectors.flush()  # anything the writer's background embedder left (it flushed at its end)
            pending = client.vectors.pending(SHARED)
        (run / "final").touch()  # the searcher's final comparisons, on a memory nobody writes to
        _wait_exit(procs, [n for role, n, _ in WORKERS if role == "searcher"], run, 120)
        with pgmem.connect(namespace=NAMESPACE) as client:

            def drained() -> bool:
                return all(client.queues.depth(q)["ready"] == 0 for q in (QUEUE, INBOX))

            _until("the queues did not drain", 60 + 2 * 10, drained)  # a lost claim's lease is 10 s
            depths = {q: client.queues.depth(q) for q in (QUEUE, INBOX)}
        (run / "stop-consume").touch()
        _wait_exit(procs, [n for role, n, _ in WORKERS if role.endswith("consumer")], run, 60)
        for name, proc in procs.items():
            assert proc.returncode == 0, f"worker {name} failed: {(run / f'{name}.log').read_text()[-5000:]}"

        # -- what is there ----------------------------------------------------------------------------
        reports = {name: json.loads((run / f"{name}.json").read_text()) for _, name, _ in WORKERS}
        journal = _journal(run)
        pushed = {i for _, i in journal.get("P", []) + journal.get("Q", [])}
        added = [i for _, i in journal.get("A", [])]
        with psycopg.connect(_owner_dsn(home)) as conn:
            effects = Counter(
                {m: int(n) for m, n in conn.execute("SELECT message_id, count(*) FROM soak_effects GROUP BY 1")}
            )
        with pgmem.connect(namespace=NAMESPACE) as client:
            env_ids = Counter(m.id for m in client.messages.last(ENV))
            shared_ids = Counter(m.id for m in client.messages.last(SHARED))
            missing_items: list[str] = []
            item_puts = 0
            for name, keys in _by_worker(journal.get("I", [])).items():
                item_puts += len(keys)
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    rows = {r.key: r.value for r in client.items.get_many(("store", name), chunk)}
                    missing_items += [f"{name}/{k}" for k in chunk if rows.get(k, {}).get("n") != int(k[1:])]

        # -- the figures ------------------------------------------------------------------------------
        ops: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for r in reports.values():
            ops.update(r["ops"])
            errors.update(r["errors"])
        untyped = [u for r in reports.values() for u in r["untyped"]]
        untyped_count = sum(r["untyped_count"] for r in reports.values())
        recovery: dict[str, list[tuple[float, float, str]]] = {}  # per kind: (back, outage, worker) per fault
        for fault in faults:
            for name, r in reports.items():
                recovery.setdefault(fault["kind"], []).append((*_recovery(r, fault), name))
        backs = [b for v in recovery.values() for b, _, _ in v]
        lost = sorted(pushed - set(effects))
        duplicated = {m: n for m, n in effects.items() if n > 1}
        searcher = reports["find0"]
        summary = {
            "date": time.strftime("%Y-%m-%d"),
            "load_average": [round(x, 1) for x in os.getloadavg()],
            "wall_s": round(time.monotonic() - started, 1),
            "chaos_s": round(chaos_ended - chaos_began, 1),
            "workers": len(WORKERS),
            "ops": dict(sorted(ops.items())),
            "faults": dict(Counter(f["kind"] for f in faults)),
            "fault_log": [
                {k: (round(v - chaos_began, 2) if k in ("begun", "ended") else v) for k, v in f.items()} for f in faults
            ],
            "backends_terminated": sum(f.get("terminated", 0) for f in faults),
            "recovery_s": {kind: _figures([b for b, _, _ in v]) for kind, v in recovery.items()},
            "recovery_all_s": _figures(backs),
            "outage_s": {kind: _figures([o for _, o, _ in v]) for kind, v in recovery.items()},
            "slowest_back": {kind: max(v)[2] for kind, v in recovery.items()},
            "errors": dict(errors.most_common()),
            "untyped": untyped_count,
            "acknowledged_pushes": len(pushed),
            "effects": sum(effects.values()),
            "lost": len(lost),
            "duplicated": len(duplicated),
            "effects_not_journalled": len(set(effects) - pushed),
            "adds": len(added),
            "ambiguous_adds": reports["add0"].get("ambiguous_adds"),
            "shared_memory": sum(shared_ids.values()),
            "item_puts": item_puts,
            "missing_items": len(missing_items),
            "lost_item_reads": reports["put0"].get("lost_reads"),
            "cache_compared": searcher.get("compared"),
            "cache_final": searcher.get("final"),
            "cache_stats": searcher.get("cache"),
            "queue_depths": depths,
            "pending_vectors": pending,
            "abandoned": {n: r["abandoned"] for n, r in reports.items() if r["abandoned"]},
        }
        (tmp_path / "soak.json").write_text(json.dumps(summary, indent=2))
        _print(summary, tmp_path / "soak.json")
        for name, r in reports.items():
            for kind, sample in r["samples"].items():
                print(f"  {name} {kind}: {sample[:160]!r}")

        # -- the targets ------------------------------------------------------------------------------
        assert untyped_count == 0, json.dumps(untyped, indent=1)[:5000]
        own = [k for k in errors if k.startswith("own:") and not k.startswith("own:psycopg")]
        assert own == [], own  # the consumers' own connection: the driver's errors, nothing else
        assert not summary["abandoned"]
        assert lost == [], f"{len(lost)} acknowledged pushes never took effect: {lost[:20]}"
        assert duplicated == {}, f"duplicated effects: {list(duplicated.items())[:20]}"
        assert set(effects) <= pushed, "an effect of a message no publisher was told it pushed"
        assert all(d["ready"] == 0 and d["dead"] == 0 for d in depths.values()), depths
        published = [i for _, i in journal.get("P", [])]
        assert [i for i in published if env_ids[i] != 1] == [], "a published message not in its memory exactly once"
        assert [i for i in added if shared_ids[i] != 1] == [], "an acknowledged add not in the memory exactly once"
        assert len(added) == len(set(added))
        assert set(shared_ids) == set(added) | {m.id for m in seeds}, "a message in the memory nobody added"
        assert missing_items == [], missing_items[:20]
        assert reports["put0"]["lost_reads"] == []
        assert pending == {}
        final = searcher["final"]
        assert final.get("equal", 0) == FINAL_CHECKS and final.get("mismatch", 0) == 0, (final, searcher["mismatches"])
        assert searcher["compared"].get("mismatch", 0) == 0, searcher["mismatches"]
        assert max(backs) <= RECOVERY_BOUND, summary["recovery_s"]  # inf: a worker never came back
        assert all(f["terminated"] > 0 for f in faults if f["kind"] == "terminate")
        assert sum(n for k, n in errors.items() if not k.startswith("own:")) > 0, "no fault was felt"
        assert all(r["ops"] for r in reports.values())
    finally:
        proxy.close()
        for proc in procs.values():
            if proc.poll() is None:
                kill_tree(proc.pid)
        status = server.status(home)
        if status.pid is not None:
            kill_tree(status.pid)
        shutil.rmtree(home, ignore_errors=True)


def _by_worker(entries: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, ident in entries:
        out.setdefault(name, []).append(ident)
    return out


def _recovery(report: dict[str, Any], fault: dict[str, Any]) -> tuple[float, float]:
    """(back, outage) of one worker for one fault. back: seconds from the fault's end until the first
    successful call the worker began after it ended (inf: none) returned; not any call that returned after
    the end: a SIGKILLed server's backends finish the statement in hand. outage: the longest time between
    two successful calls of the worker, from the last one before the fault began to that one."""
    ended = fault["ended"]
    calls = report["successes"]  # (start, end), in order
    back = next((i for i, (start, _) in enumerate(calls) if start >= ended), None)
    if back is None:
        return float("inf"), float("inf")
    ends = [end for _, end in calls]
    first = max(0, bisect.bisect_left(ends, fault["begun"]) - 1)
    outage = max((b - a for a, b in itertools.pairwise(ends[first : back + 1])), default=0.0)
    return ends[back] - ended, outage


def _figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "max": round(ordered[-1], 2),
    }


def _print(summary: dict[str, Any], path: Path) -> None:
    print(
        f"\nchaos soak, {summary['date']}: {summary['wall_s']} s in all, {summary['chaos_s']} s of faults, "
        f"{summary['workers']} processes, load average {summary['load_average']} ({path})"
    )
    print(f"{'operations':<28}" + "  ".join(f"{k} {v:,}" for k, v in summary["ops"].items()))
    print(
        f"{'faults':<28}"
        + "  ".join(f"{k} {v}" for k, v in summary["faults"].items())
        + f"  (backends terminated: {summary['backends_terminated']})"
    )
    for kind, r in summary["recovery_s"].items():
        o = summary["outage_s"][kind]
        print(
            f"{'back after ' + kind:<28}p50 {r['p50']:.2f} s  max {r['max']:.2f} s  ({r['n']} worker-faults); "
            f"longest outage p50 {o['p50']:.2f} s  max {o['max']:.2f} s; slowest {summary['slowest_back'][kind]}"
        )
    a = summary["recovery_all_s"]
    print(f"{'back, all faults':<28}p50 {a['p50']:.2f} s  p95 {a['p95']:.2f} s  max {a['max']:.2f} s")
    print(
        f"{'server back after':<28}"
        + "  ".join(f"{f['kind']} {f['server_back']:.2f} s" for f in summary["fault_log"] if "server_back" in f)
    )
    print(
        f"{'errors by type':<28}"
        + "  ".join(
            f"{k.rsplit('.', 1)[-1]}{' (own)' if k.startswith('own:') else ''} {v}"
            for k, v in summary["errors"].items()
        )
    )
    print(f"{'untyped errors':<28}{summary['untyped']}")
    print(
        f"{'pushes+publishes acked':<28}{summary['acknowledged_pushes']:,}; effects {summary['effects']:,}; "
        f"lost {summary['lost']}, duplicated {summary['duplicated']}"
    )
    print(
        f"{'adds acked':<28}{summary['adds']:,} (ambiguous: {summary['ambiguous_adds']}); "
        f"in the memory {summary['shared_memory']:,} with the {SEED_MESSAGES} seeds"
    )
    print(f"{'item puts acked':<28}{summary['item_puts']:,}; missing {summary['missing_items']}")
    print(
        f"{'cache vs exact':<28}during {summary['cache_compared']}; final {summary['cache_final']}; "
        f"stats {summary['cache_stats']}"
    )
