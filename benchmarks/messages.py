"""Message memory: pgmem against MetaGPT-style in-memory lists and dicts, a hand-written psycopg query,
and raw binary COPY — side by side in one run, reported as ratios.

    python -m benchmarks.messages                   # 1k, 10k, 100k messages (a few minutes)
    python -m benchmarks.messages --quick           # a smoke run
    python -m benchmarks.messages --dsn postgresql://...   # another server (default: throwaway embedded)

How cost grows with the number n of stored messages (m observed, k asked for):
  pgmem get(k):            O(k + log n)  walk of memory_entries_order_key backwards
  pgmem get_by_action(a):  O(|a| + log n) memory_entries_cause_by_idx
  pgmem find_news(m, k=0): O(m log n)    one primary-key probe per observed message, one statement
  pgmem add:               O(log n)      one statement (index inserts)
  in-memory add:           O(n)          MetaGPT checks `message in storage` (a list scan) first
  in-memory find_news:     O(n * m)      `m not in storage[-k:]` for every observed message
  in-memory get(k), index: O(k), O(|a|)
"""

from __future__ import annotations

import argparse
import hashlib
import random
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table

import pgmem
from benchmarks._common import bench_database, texts, timed, timed_together, write_json
from pgmem.integrations.metagpt import Memory

ACTIONS = [
    f"metagpt.actions.{m}.{c}"
    for m, c in [
        ("add_requirement", "UserRequirement"),
        ("write_prd", "WritePRD"),
        ("design_api", "WriteDesign"),
        ("project_management", "WriteTasks"),
        ("write_code", "WriteCode"),
        ("write_code_review", "WriteCodeReview"),
        ("write_test", "WriteTest"),
        ("run_code", "RunCode"),
        ("debug_error", "DebugError"),
        ("summarize_code", "SummarizeCode"),
        ("search_and_summarize", "SearchAndSummarize"),
        ("research", "CollectLinks"),
        ("research", "WebBrowseAndSummarize"),
        ("research", "ConductResearch"),
        ("write_docstring", "WriteDocstring"),
        ("prepare_documents", "PrepareDocuments"),
        ("fix_bug", "FixBug"),
        ("write_prd_review", "WritePRDReview"),
        ("design_api_review", "DesignReview"),
        ("execute_task", "ExecuteTask"),
    ]
]
RARE = "metagpt.actions.rare.RareAction"  # holds exactly 10 messages at every size
ROLES = ["Alice", "Bob", "Eve", "Mike", "Ed", "David"]


class MGMessage(BaseModel):
    """MetaGPT's Message fields, with pydantic's default equality (all fields), as MetaGPT compares."""

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    content: str
    instruct_content: BaseModel | None = None
    role: str = "user"
    cause_by: str = ""
    sent_from: str = ""
    send_to: set[str] = Field(default_factory=lambda: {"<all>"})


class InMemory:
    """MetaGPT's Memory semantics on a list and a defaultdict (the seed's data structures)."""

    def __init__(self) -> None:
        self.storage: list[MGMessage] = []
        self.index: defaultdict[str, list[MGMessage]] = defaultdict(list)

    def add(self, message: MGMessage) -> None:
        if message in self.storage:
            return
        self.storage.append(message)
        if message.cause_by:
            self.index[message.cause_by].append(message)

    def load(self, messages: list[MGMessage]) -> None:  # fill without the O(n) check, for set-up only
        for message in messages:
            self.storage.append(message)
            self.index[message.cause_by].append(message)

    def get(self, k: int = 0) -> list[MGMessage]:
        return self.storage[-k:]

    def get_by_action(self, action: str) -> list[MGMessage]:
        return self.index[action]

    def find_news(self, observed: list[MGMessage], k: int = 0) -> list[MGMessage]:
        already = self.get(k)
        return [m for m in observed if m not in already]


def make_messages(n: int, corpus: list[str], rng: random.Random) -> list[MGMessage]:
    rare_at = set(rng.sample(range(n), 10))
    return [
        MGMessage(
            content=corpus[rng.randrange(len(corpus))],
            role=rng.choice(ROLES),
            cause_by=RARE if i in rare_at else rng.choice(ACTIONS),
            sent_from=rng.choice(ROLES),
            send_to={rng.choice(ROLES)} if rng.random() < 0.3 else {"<all>"},
        )
        for i in range(n)
    ]


HAND_LAST_K = """
SELECT e.seq, m.id, m.content, m.instruct_content, m.role, m.cause_by, m.sent_from, m.send_to,
       m.metadata, m.tool_calls, m.name, m.tool_call_id, m.message_class, m.created_at
FROM (SELECT seq, message_id FROM pgmem.memory_entries WHERE namespace = %s AND memory = %s
      ORDER BY seq DESC LIMIT %s) AS e
JOIN pgmem.messages AS m ON m.namespace = %s AND m.id = e.message_id
ORDER BY e.seq"""

HAND_BY_ACTION = """
SELECT e.seq, m.id, m.content, m.instruct_content, m.role, m.cause_by, m.sent_from, m.send_to,
       m.metadata, m.tool_calls, m.name, m.tool_call_id, m.message_class, m.created_at
FROM pgmem.memory_entries AS e
JOIN pgmem.messages AS m ON m.namespace = e.namespace AND m.id = e.message_id
WHERE e.namespace = %s AND e.memory = %s AND e.cause_by = %s
ORDER BY e.seq"""

COPY_MESSAGES = (
    "COPY pgmem.messages (namespace, id, content, content_hash, role, cause_by, sent_from, send_to, metadata,"
    " created_at) FROM STDIN (FORMAT BINARY)"
)
COPY_ENTRIES = "COPY pgmem.memory_entries (namespace, memory, message_id, cause_by) FROM STDIN (FORMAT BINARY)"


def raw_copy(conn: psycopg.Connection[Any], namespace: str, memory: str, batch: list[pgmem.Message]) -> None:
    """What a user would hand-write: binary COPY of the same rows into the same tables."""
    with conn.transaction():
        conn.execute("INSERT INTO pgmem.memories (namespace, key) VALUES (%s, %s)", (namespace, memory))
        with conn.cursor() as cur:
            with cur.copy(COPY_MESSAGES) as copy:
                copy.set_types(
                    ["text", "text", "text", "bytea", "text", "text", "text", "text[]", "jsonb", "timestamptz"]
                )
                for m in batch:
                    copy.write_row(
                        (
                            namespace,
                            m.id,
                            m.content,
                            hashlib.sha256(m.content.encode()).digest(),
                            m.role,
                            m.cause_by,
                            m.sent_from,
                            sorted(m.send_to),
                            Jsonb(m.metadata),
                            m.created_at,
                        )
                    )
            with cur.copy(COPY_ENTRIES) as copy:
                copy.set_types(["text", "text", "text", "text"])
                for m in batch:
                    copy.write_row((namespace, memory, m.id, m.cause_by))


def run(dsn: str, sizes: list[int], *, samples: int, console: Console) -> dict[str, Any]:
    rng = random.Random(7)
    corpus = texts()
    results: dict[str, Any] = {"sizes": {}, "machine_note": "2-core shared VM; compare ratios, not absolutes"}
    client = pgmem.connect(dsn, namespace="bench", max_size=2)
    hand = psycopg.connect(dsn, autocommit=True)
    floor = timed(lambda: hand.execute("SELECT 1", prepare=True).fetchall(), iterations=samples * 4)
    results["round_trip_floor_select_1"] = floor

    for n in sizes:
        key = f"bench:{n}"
        console.print(f"[bold]{n:,} messages[/bold]: filling …")
        data = make_messages(n, corpus, rng)
        baseline = InMemory()
        baseline.load(data)
        memory = Memory(key, client=client)
        for start in range(0, n, 10_000):
            memory.add_batch(data[start : start + 10_000])
        hand.execute("ANALYZE pgmem.memory_entries")
        hand.execute("ANALYZE pgmem.messages")
        row: dict[str, Any] = {}

        # get(k=10)
        row.update(
            timed_together(
                {
                    "get_k10_pgmem_facade": lambda: memory.get(10),
                    "get_k10_pgmem_core": lambda: client.messages.last(key, 10),
                    "get_k10_hand_psycopg": lambda: hand.execute(
                        HAND_LAST_K, ("bench", key, 10, "bench"), prepare=True
                    ).fetchall(),
                    "get_k10_in_memory": lambda: baseline.get(10),
                },
                iterations=samples,
            )
        )
        assert [m.id for m in memory.get(10)] == [m.id for m in baseline.get(10)]

        # get_by_action for an action holding 10 of n messages
        row.update(
            timed_together(
                {
                    "by_action_pgmem_facade": lambda: memory.get_by_action(RARE),
                    "by_action_pgmem_core": lambda: client.messages.by_action(key, RARE),
                    "by_action_hand_psycopg": lambda: hand.execute(
                        HAND_BY_ACTION, ("bench", key, RARE), prepare=True
                    ).fetchall(),
                    "by_action_in_memory": lambda: baseline.get_by_action(RARE),
                },
                iterations=samples,
            )
        )
        assert len(memory.get_by_action(RARE)) == 10

        # find_news: 1k observed, half stored and half new
        observed = rng.sample(data, min(500, n)) + make_messages(500, corpus, rng)
        rng.shuffle(observed)
        row["find_news_1k_pgmem"] = timed(
            lambda: memory.find_news(observed), iterations=max(10, samples // 10), warmup=3
        )
        sample = observed[:20]
        loop = timed(lambda: baseline.find_news(sample), iterations=3, warmup=1)
        row["find_news_1k_in_memory"] = {
            k: (v * len(observed) / len(sample) if k.endswith("_us") else v) for k, v in loop.items()
        }
        row["find_news_1k_in_memory"]["note"] = f"measured on {len(sample)} observed, scaled linearly to 1k"
        stored_ids = {m.id for m in data}
        assert [m.id for m in memory.find_news(observed)] == [m.id for m in observed if m.id not in stored_ids]

        # add one message (the in-memory add first scans the list for the message)
        fresh = iter(make_messages(samples * 3 + 100, corpus, rng))
        row["add_pgmem_facade"] = timed(lambda: memory.add(next(fresh)), iterations=samples)
        row["add_pgmem_core"] = timed(
            lambda: client.messages.add(key, pgmem.Message(**next(fresh).model_dump())), iterations=samples
        )
        add_iterations = max(5, min(samples, 2_000_000 // max(n, 1)))
        row["add_in_memory"] = timed(lambda: baseline.add(next(fresh)), iterations=add_iterations, warmup=2)
        results["sizes"][str(n)] = row

    # batch add of 10k vs raw binary COPY of the same rows into the same tables and indexes
    batch_rows = 10_000 if max(sizes) >= 10_000 else 1_000
    add_many_s, copy_s = [], []
    for rep in range(5):
        batch = [pgmem.Message(**m.model_dump()) for m in make_messages(batch_rows, corpus, rng)]
        t0 = time.perf_counter()
        client.messages.add_many(f"batch:pgmem:{rep}", batch)
        add_many_s.append(time.perf_counter() - t0)
        copy_batch = [pgmem.Message(**m.model_dump()) for m in make_messages(batch_rows, corpus, rng)]
        t0 = time.perf_counter()
        raw_copy(hand, "bench", f"batch:copy:{rep}", copy_batch)
        copy_s.append(time.perf_counter() - t0)
    add_many_s.sort()
    copy_s.sort()
    results["batch_add"] = {
        "rows": batch_rows,
        "pgmem_add_many_rows_per_s": round(batch_rows / add_many_s[2]),
        "raw_binary_copy_rows_per_s": round(batch_rows / copy_s[2]),
    }
    client.close()
    hand.close()
    return results


def ratios(results: dict[str, Any]) -> list[tuple[str, str, float, str, bool | None]]:
    """(size, what, ratio, target, met) rows."""
    out: list[tuple[str, str, float, str, bool | None]] = []
    for n, row in results["sizes"].items():
        p = lambda k: row[k]["p50_us"]  # noqa: E731
        out.append(
            (
                n,
                "get(k=10) pgmem / hand psycopg",
                p("get_k10_pgmem_facade") / p("get_k10_hand_psycopg"),
                "<= 1.5 at 100k",
                p("get_k10_pgmem_facade") / p("get_k10_hand_psycopg") <= 1.5 if n == "100000" else None,
            )
        )
        out.append(
            (
                n,
                "get_by_action pgmem / hand psycopg",
                p("by_action_pgmem_facade") / p("by_action_hand_psycopg"),
                "<= 1.5 at 100k",
                p("by_action_pgmem_facade") / p("by_action_hand_psycopg") <= 1.5 if n == "100000" else None,
            )
        )
        speedup = p("find_news_1k_in_memory") / p("find_news_1k_pgmem")
        out.append(
            (
                n,
                "find_news 1k: in-memory loop / pgmem",
                speedup,
                ">= 100 at 100k",
                speedup >= 100 if n == "100000" else None,
            )
        )
        out.append((n, "add: pgmem / in-memory", p("add_pgmem_facade") / p("add_in_memory"), "context", None))
        out.append(
            (n, "get(k=10): pgmem / in-memory", p("get_k10_pgmem_facade") / p("get_k10_in_memory"), "context", None)
        )
    b = results["batch_add"]
    share = b["pgmem_add_many_rows_per_s"] / b["raw_binary_copy_rows_per_s"]
    out.append((str(b["rows"]), "batch add: pgmem / raw binary COPY throughput", share, ">= 0.70", share >= 0.70))
    return out


def print_tables(results: dict[str, Any], console: Console) -> None:
    table = Table(title="message memory: p50 (p99) in microseconds")
    table.add_column("operation")
    sizes = list(results["sizes"])
    for n in sizes:
        table.add_column(f"{int(n):,} msgs", justify="right")
    for key in results["sizes"][sizes[0]]:
        cells = []
        for n in sizes:
            v = results["sizes"][n][key]
            cells.append(f"{v['p50_us']:,.0f} ({v['p99_us']:,.0f})")
        table.add_row(key, *cells)
    f = results["round_trip_floor_select_1"]
    table.add_row("round-trip floor: prepared SELECT 1", *[f"{f['p50_us']:,.0f} ({f['p99_us']:,.0f})"] * len(sizes))
    console.print(table)
    b = results["batch_add"]
    console.print(
        f"batch add of {b['rows']:,}: pgmem {b['pgmem_add_many_rows_per_s']:,} rows/s, "
        f"raw binary COPY {b['raw_binary_copy_rows_per_s']:,} rows/s"
    )
    rt = Table(title="ratios (same run)")
    for c in ("size", "comparison", "ratio", "target", "met"):
        rt.add_column(c)
    for n, what, ratio, target, met in ratios(results):
        rt.add_row(n, what, f"{ratio:,.2f}", target, "" if met is None else ("yes" if met else "NO"))
    console.print(rt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="1k and 10k, fewer samples")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/messages.json"))
    args = parser.parse_args()
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]
    samples = 100 if args.quick else args.samples
    console = Console()
    with bench_database(args.dsn) as dsn:
        started = datetime.now(UTC)
        results = run(dsn, sizes, samples=samples, console=console)
    results["started"] = started.isoformat()
    results["ratios"] = [
        dict(zip(("size", "comparison", "ratio", "target", "met"), r, strict=True)) for r in ratios(results)
    ]
    write_json(args.out, results)
    print_tables(results, console)
    console.print(f"written to {args.out}")


if __name__ == "__main__":
    main()
