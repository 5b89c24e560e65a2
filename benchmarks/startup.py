"""Cold start: a whole agent process with pgmem against the same process with raw psycopg.

Agent processes are started often, so what a process pays before its first answer matters. Each run starts
a fresh Python process and times it from outside, from the start to the moment the parent reaps it; its
peak memory (``ru_maxrss`` of that child) is reported beside it. pgmem and raw runs alternate (pgmem, raw,
raw, pgmem, …) so that the machine's drift lands on both; the figures are medians.

  (a) first query: ``import pgmem``, ``pgmem.connect()`` (the DSN from ``PGMEM_DSN``, as an agent process
      gets it), ``client.messages.last(memory, 1)``; against ``import psycopg``, ``psycopg.connect(dsn)``
      and the same SELECT written by hand (the statement pgmem runs for ``last``), rows as tuples.
  (b) import alone: ``import pgmem`` against ``import psycopg`` (and a bare ``python -c pass``, the floor).

Data: one memory holding one message in a migrated database on a server started before the clock (the
throwaway embedded server unless ``--dsn`` names another). The work of each process does not grow with the
data (one index probe); the cost is the interpreter, the imports and the connection. ``--load 0,2`` (the
default) runs everything twice: on the quiet machine, then with 2 CPU-bound busy processes running.

    python -m benchmarks.startup              # 20 runs of each process, quiet and under load (~3 minutes)
    python -m benchmarks.startup --quick      # 10 runs, quiet only
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import pgmem
from benchmarks._common import bench_database, busy_processes, write_json

NAMESPACE = "startup"
MEMORY = "role:Alice"
CONTENT = "Write a PRD for a 2048 game"

PGMEM_FIRST_QUERY = f"""
import pgmem
with pgmem.connect(namespace={NAMESPACE!r}) as client:
    last = client.messages.last({MEMORY!r}, 1)
assert last[0].content == {CONTENT!r}
"""

# The statement pgmem runs for messages.last (sql/messages.sql, last_k), written out by hand.
RAW_FIRST_QUERY = f"""
import os
import psycopg
with psycopg.connect(os.environ["PGMEM_DSN"], autocommit=True) as conn:
    rows = conn.execute(
        '''SELECT e.seq, m.id, m.content, m.instruct_content, m.role, m.cause_by, m.sent_from, m.send_to,
                  m.metadata, m.tool_calls, m.name, m.tool_call_id, m.message_class, m.created_at
           FROM (SELECT seq, message_id FROM pgmem.memory_entries WHERE namespace = %s AND memory = %s
                 ORDER BY seq DESC LIMIT %s) AS e
           JOIN pgmem.messages AS m ON m.namespace = %s AND m.id = e.message_id
           ORDER BY e.seq''',
        ({NAMESPACE!r}, {MEMORY!r}, 1, {NAMESPACE!r}),
    ).fetchall()
assert rows[0][2] == {CONTENT!r}
"""

PAIRS: dict[str, dict[str, str]] = {
    "first_query": {"pgmem": PGMEM_FIRST_QUERY, "raw psycopg": RAW_FIRST_QUERY},
    "import": {"pgmem": "import pgmem", "raw psycopg": "import psycopg", "bare python": "pass"},
}

#: Modules ``import pgmem`` must not load (tests/unit/test_imports.py checks it; reported here too).
HEAVY = ("sqlalchemy", "alembic", "mako", "faiss", "openai", "typer", "rich", "numpy", "pydantic", "pydantic_settings")


def summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    walls = sorted(s["wall_ms"] for s in samples)
    return {
        "wall_ms_median": round(statistics.median(walls), 1),
        "wall_ms_min": round(walls[0], 1),
        "wall_ms_max": round(walls[-1], 1),
        "cpu_ms_median": round(statistics.median(s["cpu_ms"] for s in samples), 1),
        "peak_mib_median": round(statistics.median(s["peak_mib"] for s in samples), 1),
        "n": len(samples),
    }


# The timing loop runs in a small separate process (python -S, stdlib only): a child's ru_maxrss starts at
# the RSS of the process it was forked from, so children of this process (pgmem, numpy and rich imported)
# could never read below ~90 MiB. The runner's own RSS, about 9 MiB, is the floor of the peak column.
RUNNER = """
import json, os, sys, time
job = json.loads(sys.stdin.read())
devnull = os.open(os.devnull, os.O_WRONLY)
names = list(job["children"])

def run(name):
    start = time.perf_counter()
    pid = os.posix_spawn(
        sys.executable, [sys.executable, "-c", job["children"][name]], job["env"],
        file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)],
    )
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{name} exited with {os.waitstatus_to_exitcode(status)}")
    return {"wall_ms": wall * 1000, "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000,
            "peak_mib": usage.ru_maxrss / 1024}

for _ in range(job["warmup"]):
    for name in names:
        run(name)
samples = {name: [] for name in names}
for i in range(job["runs"]):
    for name in names[i % len(names):] + names[:i % len(names)]:  # the order rotates every round
        samples[name].append(run(name))
print(json.dumps(samples))
"""


def measure(children: dict[str, str], env: dict[str, str], runs: int, warmup: int) -> dict[str, Any]:
    """Run each child ``runs`` times, interleaved with the others; medians, and the pgmem / raw ratios."""
    for code in children.values():  # fail with the child's own error, not a timing
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    job = json.dumps({"children": children, "env": env, "runs": runs, "warmup": warmup})
    done = subprocess.run(
        [sys.executable, "-S", "-c", RUNNER], input=job, env=env, capture_output=True, text=True, check=True
    )
    samples: dict[str, list[dict[str, float]]] = json.loads(done.stdout)
    out: dict[str, Any] = {name: summary(values) for name, values in samples.items()}
    # The ratio of each round's pgmem run to its raw run, then the median: robust to drift between rounds.
    paired = [p["wall_ms"] / r["wall_ms"] for p, r in zip(samples["pgmem"], samples["raw psycopg"], strict=True)]
    out["ratio_of_medians"] = round(out["pgmem"]["wall_ms_median"] / out["raw psycopg"]["wall_ms_median"], 2)
    out["ratio_paired_median"] = round(statistics.median(paired), 2)
    return out


def loaded_modules(env: dict[str, str]) -> dict[str, Any]:
    """What ``import pgmem`` and the first-query process load (untimed)."""
    probe = "import sys, json\n{}\nprint(json.dumps(sorted(sys.modules)))"
    out = {}
    for name, code in (("import pgmem", "import pgmem"), ("pgmem first query", PGMEM_FIRST_QUERY)):
        done = subprocess.run(
            [sys.executable, "-c", probe.format(code)], env=env, capture_output=True, text=True, check=True
        )
        modules = json.loads(done.stdout)
        out[name] = {
            "modules": len(modules),
            "heavy": sorted({m.split(".")[0] for m in modules} & set(HEAVY)),
        }
    return out


def seed(dsn: str) -> None:
    with pgmem.connect(dsn, namespace=NAMESPACE) as client:
        client.messages.add(MEMORY, pgmem.Message(content=CONTENT, role="Human", cause_by="UserRequirement"))


def print_tables(results: dict[str, Any], console: Console) -> None:
    for load, parts in results["loads"].items():
        table = Table(title=f"cold start, whole processes, {load} busy processes: median of {results['runs']}")
        for column in ("process", "system", "wall ms (min-max)", "cpu ms", "peak MiB", "pgmem / raw"):
            table.add_column(column, justify="right" if column != "process" else "left")
        for part, row in parts.items():
            for system in PAIRS[part]:
                s = row[system]
                ratio = ""
                if system == "pgmem":
                    ratio = f"{row['ratio_of_medians']:.2f} (paired {row['ratio_paired_median']:.2f})"
                table.add_row(
                    part,
                    system,
                    f"{s['wall_ms_median']:,.0f} ({s['wall_ms_min']:,.0f}-{s['wall_ms_max']:,.0f})",
                    f"{s['cpu_ms_median']:,.0f}",
                    f"{s['peak_mib_median']:,.1f}",
                    ratio,
                )
        console.print(table)
    for name, info in results["modules"].items():
        console.print(f"{name}: {info['modules']} modules; heavy ones loaded: {', '.join(info['heavy']) or 'none'}")
    for load, parts in results["loads"].items():
        ratio = parts["first_query"]["ratio_of_medians"]
        met = "met" if ratio <= 1.5 else "NOT met"
        console.print(f"target first query <= 1.5x raw psycopg, {load} busy: {ratio:.2f} ({met})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs of each process (>= 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs of each process first")
    parser.add_argument("--load", default="0,2", help="busy processes during a measurement, comma-separated")
    parser.add_argument("--quick", action="store_true", help="10 runs, quiet only")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/startup.json"))
    args = parser.parse_args()
    runs, loads = (10, [0]) if args.quick else (max(10, args.runs), [int(n) for n in args.load.split(",")])
    console = Console()
    # An installed pgmem has its bytecode compiled (pip compiles it at install). A checkout whose sources
    # changed since their last import, run under PYTHONDONTWRITEBYTECODE (set where the README's figures
    # were measured), would compile them again in every timed process: 27 ms after a regenerated core.
    compileall.compile_dir(Path(pgmem.__file__).parent, quiet=1)
    results: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "runs": runs,
        "data": "one memory holding one message",
        "loads": {},
    }
    with bench_database(args.dsn) as dsn:
        seed(dsn)
        env = {**os.environ, "PGMEM_DSN": dsn}
        results["modules"] = loaded_modules(env)
        for load in loads:
            with busy_processes(load):
                results["loads"][str(load)] = {
                    part: measure(children, env, runs, args.warmup) for part, children in PAIRS.items()
                }
    write_json(args.out, results)
    print_tables(results, console)
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
