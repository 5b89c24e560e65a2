"""The context for the next turn (``client.context``) against reading the last 20 messages, on one memory
of 100k messages, in the same run.

    python -m benchmarks.context                       # 100k messages, budgets 1,000 and 4,000 tokens
    python -m benchmarks.context --messages 20000 --iterations 100 --busy 2

A conversation of real English lines (``../shared/data``: CPython comments and docstrings) with a system
prompt, a pinned profile, tool calls with their results every 25 turns, and hierarchical summaries of it
(``OfflineSummarizer``, 500 messages each, 5 to a level above). Timed interleaved (``timed_together``), each call as
an agent makes it (a fresh statement each time, the client's caches warm):

* ``last 20`` — ``client.messages.last(memory, 20)``: the baseline of the target;
* ``last N`` — ``last(memory, N)``, N the messages the largest budget's window holds: reading as many;
* ``context <budget>`` — pinned, summary and window, no query;
* ``context <budget> + keyword`` — the same with a query: related messages by keyword search (no model);
* ``context <budget> + hybrid`` — with a model (the offline embedder, vectors of every message): related
  messages by hybrid search; the query's embedding is computed inside the call, as an agent's would be.

``keyword_search k=5`` and ``hybrid_search k=5`` are the related part's searches on their own (over the
whole memory). Target (issue 36): p50 of ``context`` <= 2x ``last 20`` at 100k messages. ``--busy N`` runs N CPU-bound
processes meanwhile (the machine under load).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import pgmem
from benchmarks._common import bench_database, busy_processes, texts, timed_together, write_json
from pgmem import Message
from pgmem.summarizer import CompressionPolicy, OfflineSummarizer

MEMORY = "team:chat"


def load(client: pgmem.Client, n: int, vectors: bool) -> None:
    """``n`` messages in MEMORY, their summaries (500 messages each, then 5 of those...), and (``vectors``) a model."""
    lines = [t for t in texts() if t.strip()]
    batch: list[Message] = [
        Message(content="You are the team's engineering assistant. Answer briefly.", role="system"),
        Message(content="Profile: the team ships a CLI in Python 3.12.", role="user", metadata={"pinned": True}),
    ]
    for i in range(n - 2):
        if i % 25 == 24:
            call = {"id": f"call{i}", "type": "function", "function": {"name": "search_docs", "arguments": "{}"}}
            batch.append(Message(content="", role="assistant", tool_calls=[call]))
            batch.append(Message(content=lines[i % len(lines)], role="tool", tool_call_id=f"call{i}"))
        else:
            batch.append(Message(content=lines[i % len(lines)], role="user" if i % 2 else "assistant"))
        if len(batch) >= 5_000:
            client.messages.add_many(MEMORY, batch)
            batch = []
    if batch:
        client.messages.add_many(MEMORY, batch)
    client.summaries.compress(MEMORY, OfflineSummarizer(), CompressionPolicy(chunk=500))
    if vectors:
        client.vectors.enable(MEMORY)
        client.vectors.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--budgets", default="500,1000,4000")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes running meanwhile")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/context.json"))
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    results: dict[str, Any] = {"messages": args.messages, "busy": args.busy}
    query = "how does the parser handle a syntax error in a string literal?"
    with bench_database(args.dsn, "_context") as dsn, pgmem.connect(dsn, namespace="bench") as client:
        load(client, args.messages, vectors=False)
        # The same number of messages as the largest budget's window, read by last(): what reading them costs
        window = client.context(MEMORY, budget=budgets[-1]).parts["window"].kept
        plain = {f"last {window}": lambda: client.messages.last(MEMORY, window)}
        plain |= {f"context {b}": (lambda b=b: client.context(MEMORY, budget=b)) for b in budgets}
        keyword: dict[str, Any] = {
            "keyword_search k=5": lambda: client.vectors.keyword_search(query, memory=MEMORY, k=5)
        }
        keyword |= {
            f"context {b} + keyword": (lambda b=b: client.context(MEMORY, budget=b, query=query)) for b in budgets
        }
        # Two groups, each timed interleaved with its own last 20: between searches of tens of milliseconds
        # (their parallel workers, the caches they evict) a call of one millisecond took twice as long.
        with busy_processes(args.busy) if args.busy else contextlib.nullcontext():
            timings = timed_together(
                {"last 20": lambda: client.messages.last(MEMORY, 20), **plain}, iterations=args.iterations
            )
            timings |= {
                f"{name} (searches)": value
                for name, value in timed_together(
                    {"last 20": lambda: client.messages.last(MEMORY, 20), **keyword}, iterations=args.iterations
                ).items()
            }
        client.vectors.enable(MEMORY)
        client.vectors.flush()
        hybrid = {f"context {b} + hybrid": (lambda b=b: client.context(MEMORY, budget=b, query=query)) for b in budgets}
        hybrid["hybrid_search k=5"] = lambda: client.vectors.hybrid_search(query, memory=MEMORY, k=5)
        with busy_processes(args.busy) if args.busy else contextlib.nullcontext():
            timings |= {
                f"{name} (vectors on)": value
                for name, value in timed_together(
                    {"last 20": lambda: client.messages.last(MEMORY, 20), **hybrid}, iterations=args.iterations
                ).items()
            }
        sample = client.context(MEMORY, budget=budgets[-1], query=query)
        results["sample"] = {
            p: {"kept": r.kept, "tokens": r.tokens, "dropped": r.dropped} for p, r in sample.parts.items()
        }
        results["tokenizer"] = sample.tokenizer
    base = {suffix: timings[f"last 20{suffix}"]["p50_us"] for suffix in ("", " (searches)", " (vectors on)")}
    results["timings"] = timings
    print(f"{args.messages:,} messages, {args.iterations} rounds, {args.busy} busy processes", end="; ")
    print(f"tokenizer {results['tokenizer']}")
    print(f"{'call':<36} {'p50 ms':>8} {'p99 ms':>8} {'x last 20':>10}")
    for name, t in timings.items():
        suffix = next((x for x in (" (searches)", " (vectors on)") if name.endswith(x)), "")
        ratio = t["p50_us"] / base[suffix]
        results.setdefault("ratios", {})[name] = round(ratio, 2)
        print(f"{name:<36} {t['p50_us'] / 1000:>8.2f} {t['p99_us'] / 1000:>8.2f} {ratio:>9.2f}x")
    print("parts at", budgets[-1], "tokens:", results["sample"])
    write_json(args.out, results)


if __name__ == "__main__":
    main()
