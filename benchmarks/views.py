"""The analytics views (sql/views.sql) at 100k and 1M messages.

Data: synthetic agent teams, bulk-loaded with ``INSERT … SELECT generate_series`` through pgmem's real
tables, triggers and indexes: ``n`` messages spread over ``namespaces`` namespaces (interleaved in time,
as concurrent tenants write), each namespace one MetaGPT pipeline team (5 roles, 5 actions cycling, one
``team`` memory holding every message, one reply_to link in 5), a queue history of ``n / 10`` items (live,
dead and archived) and ``n / 100`` logged searches. Contents are ~100 characters.

Measured: each main view as a user queries it — filtered to one namespace (and memory), and the same
over the whole database (all namespaces) for the aggregating views — p50 over a few runs, in ms. Cost
growth: a filtered view reads only its namespace's rows through the (namespace, …) indexes, O(rows of
the namespace); unfiltered aggregates read everything, O(n).

    python -m benchmarks.views            # 100k and 1M messages (the 1M load takes several minutes)
    python -m benchmarks.views --quick    # 20k messages, a smoke run
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks._common import bench_database, timed, write_json

RESULTS = Path(__file__).resolve().parent / "results"

ROLES = ["Human", "ProductManager", "Architect", "Engineer", "QaEngineer"]
ACTIONS = [
    "metagpt.actions.add_requirement.UserRequirement",
    "metagpt.actions.write_prd.WritePRD",
    "metagpt.actions.design_api.WriteDesign",
    "metagpt.actions.write_code.WriteCode",
    "metagpt.actions.write_code_review.WriteCodeReview",
]

# Message i belongs to namespace i % namespaces; within it, messages follow the pipeline's five steps
# (role k, action k, addressed to role k + 1); every fifth one names the message before it in reply_to.
LOAD_MESSAGES = """
INSERT INTO pgmem.messages (namespace, id, content, content_hash, role, cause_by, sent_from, send_to,
                            metadata, tokens, created_at)
SELECT 'ns' || (i %% %(namespaces)s), 'm' || i, c.content, sha256(convert_to(c.content, 'UTF8')),
       (%(roles)s::text[])[1 + (i / %(namespaces)s) %% 5],
       (%(actions)s::text[])[1 + (i / %(namespaces)s) %% 5],
       (%(roles)s::text[])[1 + (i / %(namespaces)s) %% 5],
       ARRAY[(%(roles)s::text[])[1 + (i / %(namespaces)s + 1) %% 5]],
       CASE WHEN i %% 5 = 4 AND i >= %(namespaces)s
            THEN jsonb_build_object('reply_to', 'm' || (i - %(namespaces)s)) ELSE '{}'::jsonb END,
       CASE WHEN i %% 3 = 0 THEN 20 + i %% 50 END,
       timestamptz '2026-01-01 00:00:00+00' + i * interval '100 milliseconds'
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS i
CROSS JOIN LATERAL (SELECT 'step ' || i || ': ' || md5(i::text) || ' ' || md5((i + 1)::text) AS content) AS c
"""

LOAD_MEMORIES = """
INSERT INTO pgmem.memories (namespace, key)
SELECT 'ns' || k, 'team' FROM generate_series(0, %(namespaces)s - 1) AS k
"""

LOAD_ENTRIES = """
INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by)
SELECT namespace, 'team', id, cause_by FROM pgmem.messages
WHERE seq BETWEEN %(lo)s AND %(hi)s
ORDER BY seq
"""

LOAD_QUEUES = """
WITH items AS (
    SELECT 'ns' || (j %% %(namespaces)s) AS namespace, 'm' || j AS message_id, i
    FROM generate_series(0, %(n)s / 10 - 1) AS i
    CROSS JOIN LATERAL (SELECT i * 10 + (i / 10) %% 10 AS j) AS pick
    WHERE j < %(n)s
), live AS (
    INSERT INTO pgmem.queue_items (namespace, queue, message_id, status, attempts, died_at, enqueued_at)
    SELECT namespace, 'inbox:' || (%(roles)s::text[])[1 + i %% 5], message_id,
           CASE WHEN i %% 50 = 0 THEN 'dead' ELSE 'ready' END,
           CASE WHEN i %% 50 = 0 THEN 5 ELSE i %% 2 END,
           CASE WHEN i %% 50 = 0 THEN now() END,
           now() - (i %% 600) * interval '1 second'
    FROM items WHERE i %% 4 = 0
)
INSERT INTO pgmem.queue_archive_batches (namespace, queue, acked_at, ids, message_ids, priorities, enqueued_at,
                                         claimed_at, attempts, claimed_by, dedup_keys)
SELECT namespace, queue, max(acked_at), array_agg(id), array_agg(message_id), array_agg(0), array_agg(enqueued_at),
       array_agg(claimed_at), array_agg(attempts), array_agg(NULL::text), array_agg(NULL::text)
FROM (
    SELECT namespace, 1000000000 + i AS id, 'inbox:' || (%(roles)s::text[])[1 + i %% 5] AS queue, message_id,
           now() - interval '2 hours' + i * interval '10 milliseconds' AS enqueued_at,
           now() - interval '2 hours' + i * interval '10 milliseconds' + interval '1 second' AS claimed_at,
           now() - interval '2 hours' + i * interval '10 milliseconds' + interval '3 seconds' AS acked_at,
           1 + (i %% 7 = 0)::int AS attempts, i
    FROM items WHERE i %% 4 <> 0
) AS acked
GROUP BY namespace, queue, i / 200  -- acknowledged in batches, as consumers do
"""

LOAD_RETRIEVALS = """
INSERT INTO pgmem.retrieval_log (namespace, kind, memory, label, query, k, message_ids, scores)
SELECT 'ns' || (i %% %(namespaces)s), 'vector', 'team', 'stage:' || (i %% 7), 'query ' || i, 5,
       ARRAY['m' || i, 'm' || (i + 1), 'm' || (i + 2), 'm' || (i + 3), 'm' || (i + 4)],
       ARRAY[0.9, 0.8, 0.7, 0.6, 0.5]::float8[]
FROM generate_series(0, %(n)s / 100 - 1) AS i
"""

#: The views as a user queries them: one namespace (and memory), and the aggregates over everything.
VIEWS: dict[str, str] = {
    "conversation_facts (last 100 of a memory)": (
        "SELECT * FROM pgmem.conversation_facts WHERE namespace = 'ns1' AND memory = 'team' ORDER BY seq DESC LIMIT 100"
    ),
    "role_activity (one namespace)": "SELECT * FROM pgmem.role_activity WHERE namespace = 'ns1'",
    "action_activity (one namespace)": "SELECT * FROM pgmem.action_activity WHERE namespace = 'ns1'",
    "action_flow (one memory)": "SELECT * FROM pgmem.action_flow WHERE namespace = 'ns1' AND memory = 'team'",
    "who_talks_to_whom (one namespace)": "SELECT * FROM pgmem.who_talks_to_whom WHERE namespace = 'ns1'",
    "queue_health (one namespace)": "SELECT * FROM pgmem.queue_health WHERE namespace = 'ns1'",
    "queue_throughput (one namespace)": "SELECT * FROM pgmem.queue_throughput WHERE namespace = 'ns1'",
    "retrieval_hits (one label)": (
        "SELECT * FROM pgmem.retrieval_hits WHERE namespace = 'ns1' AND label = 'stage:3' "
        "ORDER BY logged_at DESC LIMIT 100"
    ),
    "role_activity (all namespaces, per agent)": (
        "SELECT agent, sum(messages), sum(tokens_estimated) FROM pgmem.role_activity GROUP BY agent"
    ),
    "action_flow (all namespaces)": (
        "SELECT from_action_name, to_action_name, sum(edges) FROM pgmem.action_flow GROUP BY 1, 2"
    ),
    "queue_health (all namespaces)": "SELECT * FROM pgmem.queue_health",
}


def load(conn: psycopg.Connection[Any], n: int, namespaces: int, *, chunk: int = 100_000) -> None:
    """Bulk-load the synthetic data set (see the module docstring) and ANALYZE; commits as it goes."""
    params: dict[str, Any] = {"namespaces": namespaces, "roles": ROLES, "actions": ACTIONS, "n": n}
    conn.execute(LOAD_MEMORIES, params)
    conn.commit()
    for start in range(0, n, chunk):
        conn.execute(LOAD_MESSAGES, {**params, "start": start, "stop": min(n, start + chunk)})
        conn.commit()
    lo, hi = conn.execute("SELECT min(seq), max(seq) FROM pgmem.messages").fetchone() or (0, 0)
    for start in range(lo, hi + 1, chunk):
        conn.execute(LOAD_ENTRIES, {"lo": start, "hi": start + chunk - 1})
        conn.commit()
    conn.execute(LOAD_QUEUES, params)
    conn.execute(LOAD_RETRIEVALS, params)
    conn.commit()
    conn.execute("ANALYZE")
    conn.commit()


def run_size(dsn: str, n: int, namespaces: int, iterations: int) -> dict[str, Any]:
    with bench_database(dsn, suffix=f"_views_{n}") as db:
        with psycopg.connect(db) as conn:
            started = time.perf_counter()
            load(conn, n, namespaces)
            load_s = time.perf_counter() - started
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
            out: dict[str, Any] = {"messages": n, "namespaces": namespaces, "load_s": round(load_s, 1), "views": {}}
            for name, query in VIEWS.items():
                rows = len(conn.execute(query).fetchall())  # warm the cache once
                stats = timed(lambda: conn.execute(query).fetchall(), iterations=iterations, warmup=1)
                out["views"][name] = {"ms_p50": round(stats["p50_us"] / 1000, 2), "rows": rows}
                print(f"  {n:>9,} {name:<45} {stats['p50_us'] / 1000:>10.2f} ms  ({rows} rows)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="server to use (default: $PGMEM_BENCH_DSN, else a throwaway embedded one)")
    parser.add_argument("--quick", action="store_true", help="20k messages only (a smoke run)")
    parser.add_argument("--sizes", default=None, help="comma-separated message counts (default 100000,1000000)")
    parser.add_argument("--namespaces", type=int, default=100, help="namespaces the messages spread over")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    sizes = [20_000] if args.quick else [int(s) for s in (args.sizes or "100000,1000000").split(",")]
    results = [run_size(args.dsn, n, args.namespaces, args.iterations) for n in sizes]
    print()
    header = f"{'view (p50, ms)':<45}" + "".join(f"{n:>14,}" for n in sizes)
    print(header)
    print("-" * len(header))
    for name in VIEWS:
        print(f"{name:<45}" + "".join(f"{r['views'][name]['ms_p50']:>14.2f}" for r in results))
    print(f"{'(load, s)':<45}" + "".join(f"{r['load_s']:>14.1f}" for r in results))
    write_json(
        RESULTS / ("views-quick.json" if args.quick else "views.json"),
        {"machine": platform.platform(), "python": platform.python_version(), "results": results},
    )


if __name__ == "__main__":
    main()
