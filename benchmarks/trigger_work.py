"""The trigger work of a write, measured against the same work done by the writing statement itself.

Three statement-level triggers keep the embedding outbox and the vector log (the FAISS caches' change
feed) in step with writes: ``memory_entries_added`` (a message added to a memory with embedding models is
queued for embedding), ``embeddings_added`` (a stored vector is logged for every memory holding its
message, under a per-memory revision, and announced with NOTIFY) and ``memory_entries_removed``. Citus
refuses triggers on distributed tables (docs/scale-out.md), so a distributed pgmem must do that work in
the statements that write. This benchmark measures what that costs, or saves, on one node:

* ``trigger``: pgmem's statements as they are (``add_one``, ``store_vectors``), triggers on.
* ``statement``: the triggers disabled; the same statements with the trigger's work as more CTEs
  (:data:`ADD_ONE` and :data:`STORE_VECTORS` below: the design of docs/scale-out.md, "Trigger work").
* ``none``: the triggers disabled, pgmem's statements as they are: no outbox, no vector log (what the
  write costs without that work; its state is not compared).

Each runs in its own fresh database on the same server, the same messages and vectors (the real MiniLM
vectors of ../shared/data), operations interleaved, p50/p99 per call. After the run both databases must
hold the same outbox, the same vector log (memory, revision, message, model, op) and the same memory
revisions: the statement form is checked to do exactly the trigger's work, not just to be fast.

``python -m benchmarks.trigger_work [--messages N] [--batch B] [--memories M]`` (about a minute).
Cost growth: both forms are O(batch × memories holding each message) per call, plus one row lock per
memory touched.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from benchmarks._common import DATA, bench_database, texts, write_json
from pgmem.models import Message
from pgmem.planning.rows import INSERT_COLUMNS, encode
from pgmem.planning.statements import fragments, load, parse

NS = "bench"
MODEL_NAME = "all-MiniLM-L6-v2-lookup"

#: ``add_one`` of sql/messages.sql with the work of the trigger ``memory_entries_added`` as CTEs: the new
#: entry is queued in the outbox for each of the memory's models that has no vector of the message yet,
#: and the vectors it already has join the memory's vector log (`changes` ... `rung`, the same chain as
#: in :data:`STORE_VECTORS`).
ADD_ONE = """
WITH {{settle_shared}}, memory AS (
    {{register_memory}}
), message AS (
    {{insert_message}}
), entry AS (
    INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by)
    SELECT %(ns)s, %(memory)s, %(id)s, %(cause_by)s FROM settle
    ON CONFLICT DO NOTHING
    RETURNING seq, message_id
), models AS MATERIALIZED (
    SELECT mm.model_id FROM pgmem.memory_models AS mm WHERE mm.namespace = %(ns)s AND mm.memory = %(memory)s
), queued AS (
    INSERT INTO pgmem.embedding_outbox (namespace, model_id, message_id)
    SELECT %(ns)s, mo.model_id, e.message_id
    FROM entry AS e CROSS JOIN models AS mo
    WHERE NOT EXISTS (SELECT 1 FROM pgmem.embeddings AS x
                      WHERE x.namespace = %(ns)s AND x.model_id = mo.model_id AND x.message_id = e.message_id)
    ON CONFLICT DO NOTHING
), changes AS MATERIALIZED (
    SELECT %(memory)s::text AS memory, x.message_id, x.model_id,
           row_number() OVER (ORDER BY x.model_id) AS n
    FROM entry AS e CROSS JOIN models AS mo
    JOIN pgmem.embeddings AS x ON x.namespace = %(ns)s AND x.model_id = mo.model_id AND x.message_id = e.message_id
), locked AS MATERIALIZED (
    SELECT m.key FROM pgmem.memories AS m
    WHERE m.namespace = %(ns)s AND m.key IN (SELECT c.memory FROM changes AS c)
    ORDER BY m.key
    FOR NO KEY UPDATE
), bumped AS (
    UPDATE pgmem.memories AS m SET vec_rev = m.vec_rev + c.n
    FROM (SELECT memory, count(*) AS n FROM changes GROUP BY memory) AS c JOIN locked AS l ON l.key = c.memory
    WHERE m.namespace = %(ns)s AND m.key = c.memory
    RETURNING m.key, m.vec_rev - c.n AS base, m.vec_rev AS head
), logged AS (
    INSERT INTO pgmem.vector_log (namespace, memory, rev, message_id, model_id, op)
    SELECT %(ns)s, c.memory, b.base + c.n, c.message_id, c.model_id, 1
    FROM changes AS c JOIN bumped AS b ON b.key = c.memory
), rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name, rev)
    SELECT %(ns)s, 'pgmem_vectors', b.key, b.head FROM bumped AS b
)
SELECT e.seq, EXISTS (SELECT 1 FROM models) AS embeds FROM entry AS e
"""

#: ``store_vectors`` of sql/vectors.sql with the work of the trigger ``embeddings_added``: every memory that
#: holds a stored vector's message and is embedded with the model logs it, in entry order, under revisions
#: drawn with the memory's row lock taken in key order (two writers never deadlock), then rings the doorbell.
STORE_VECTORS = """
WITH stored AS (
    INSERT INTO pgmem.embeddings (namespace, model_id, message_id, embedding)
    SELECT %(ns)s, %(model)s, v.id, v.embedding
    FROM unnest(%(ids)b::text[], %(vectors)b::vector[]) AS v(id, embedding)
    ORDER BY v.id
    ON CONFLICT DO NOTHING
    RETURNING message_id
), changes AS MATERIALIZED (
    SELECT me.memory, s.message_id, row_number() OVER (PARTITION BY me.memory ORDER BY me.seq) AS n
    FROM stored AS s
    JOIN pgmem.memory_entries AS me ON me.namespace = %(ns)s AND me.message_id = s.message_id
    JOIN pgmem.memory_models AS mm
      ON mm.namespace = %(ns)s AND mm.memory = me.memory AND mm.model_id = %(model)s
), locked AS MATERIALIZED (
    SELECT m.key FROM pgmem.memories AS m
    WHERE m.namespace = %(ns)s AND m.key IN (SELECT c.memory FROM changes AS c)
    ORDER BY m.key
    FOR NO KEY UPDATE
), bumped AS (
    UPDATE pgmem.memories AS m SET vec_rev = m.vec_rev + c.n
    FROM (SELECT memory, count(*) AS n FROM changes GROUP BY memory) AS c JOIN locked AS l ON l.key = c.memory
    WHERE m.namespace = %(ns)s AND m.key = c.memory
    RETURNING m.key, m.vec_rev - c.n AS base, m.vec_rev AS head
), logged AS (
    INSERT INTO pgmem.vector_log (namespace, memory, rev, message_id, model_id, op)
    SELECT %(ns)s, c.memory, b.base + c.n, c.message_id, %(model)s, 1
    FROM changes AS c JOIN bumped AS b ON b.key = c.memory
), rung AS (
    INSERT INTO pgmem.doorbell (namespace, channel, name, rev)
    SELECT %(ns)s, 'pgmem_vectors', b.key, b.head FROM bumped AS b
    RETURNING 1
), unqueued AS (
    DELETE FROM pgmem.embedding_outbox
    WHERE namespace = %(ns)s AND model_id = %(model)s AND message_id = ANY(%(ids)b::text[])
)
SELECT count(*) AS n FROM rung
"""

_TRIGGERS_OFF = """
ALTER TABLE pgmem.memory_entries DISABLE TRIGGER memory_entries_added;
ALTER TABLE pgmem.embeddings DISABLE TRIGGER embeddings_added
"""

#: What both forms must leave identical.
_STATE = {
    "outbox": "SELECT namespace, model_id, message_id FROM pgmem.embedding_outbox ORDER BY 1, 2, 3",
    "vector_log": "SELECT namespace, memory, rev, message_id, model_id, op FROM pgmem.vector_log ORDER BY 1, 2, 3",
    "revisions": "SELECT namespace, key, vec_rev FROM pgmem.memories ORDER BY 1, 2",
}


def _setup(dsn: str, memories: int) -> int:
    """The model and ``memories`` memories embedded with it (as ``client.vectors.enable`` leaves them);
    returns the model id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgmem.embedding_models (name, dimension, kind) VALUES (%s, 384, 'vector') RETURNING id",
            (MODEL_NAME,),
        ).fetchone()
        assert row is not None
        model = int(row[0])
        for j in range(memories):
            conn.execute("INSERT INTO pgmem.memories (namespace, key) VALUES (%s, %s)", (NS, f"m{j}"))
            conn.execute(
                "INSERT INTO pgmem.memory_models (namespace, memory, model_id, status) VALUES (%s, %s, %s, 'active')",
                (NS, f"m{j}", model),
            )
        conn.execute(
            f"CREATE INDEX embeddings_hnsw_m{model} ON pgmem.embeddings "  # noqa: S608 - an int
            f"USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model_id = {model}"
        )
    return model


def _add_params(row: int, line: str, memory: str) -> dict[str, Any]:
    message = Message(id=f"r{row}", content=f"{row}|{line}", cause_by="bench.Action")
    return {"ns": NS, "memory": memory, **dict(zip(INSERT_COLUMNS, encode(message), strict=True))}


def run(messages: int = 2000, batch: int = 8, memories: int = 2) -> dict[str, Any]:
    lines = [t.replace("\x00", "") for t in texts()]
    vectors = np.load(DATA / "embeddings-f16.npy").astype(np.float32)[:messages]
    forms = {"trigger": (load("messages")["add_one"], load("vectors")["store_vectors"])}
    own = parse(f"-- name: add_one\n{ADD_ONE}\n-- name: store_vectors\n{STORE_VECTORS}", fragments())
    forms["statement"] = (own["add_one"], own["store_vectors"])
    forms["none"] = forms["trigger"]
    out: dict[str, Any] = {"messages": messages, "batch": batch, "memories": memories}
    with (
        bench_database(None, "_trigger") as t_dsn,
        bench_database(t_dsn, "_statement") as s_dsn,
        bench_database(t_dsn, "_none") as n_dsn,
    ):
        dsns = {"trigger": t_dsn, "statement": s_dsn, "none": n_dsn}
        models = {name: _setup(dsn, memories) for name, dsn in dsns.items()}
        conns = {name: psycopg.connect(dsn, autocommit=True) for name, dsn in dsns.items()}
        try:
            conns["statement"].execute(_TRIGGERS_OFF)
            conns["none"].execute(_TRIGGERS_OFF)
            for conn in conns.values():
                register_vector(conn)
            adds: dict[str, list[float]] = {name: [] for name in dsns}
            stores: dict[str, list[float]] = {name: [] for name in dsns}
            order = list(dsns)
            # Adds: each message to every memory (a message is stored once and referenced by each).
            for row in range(messages):
                order = order[1:] + order[:1]  # which form goes first rotates
                for name in order:
                    for j in range(memories):
                        params = _add_params(row, lines[row], f"m{j}")
                        t0 = time.perf_counter()
                        conns[name].execute(forms[name][0], params, prepare=True).fetchall()
                        adds[name].append(time.perf_counter() - t0)
            # Stores: the vectors in batches, as the embedding worker stores them.
            for start in range(0, messages, batch):
                ids = [f"r{i}" for i in range(start, min(messages, start + batch))]
                vecs = list(vectors[start : start + len(ids)])
                order = order[1:] + order[:1]
                for name in order:
                    params = {"ns": NS, "model": models[name], "ids": ids, "vectors": vecs}
                    t0 = time.perf_counter()
                    conns[name].execute(forms[name][1], params, prepare=True)
                    stores[name].append(time.perf_counter() - t0)
            state = {name: {k: conns[name].execute(q).fetchall() for k, q in _STATE.items()} for name in forms}
        finally:
            for conn in conns.values():
                conn.close()
    same = {k: state["trigger"][k] == state["statement"][k] for k in _STATE}
    out["same outbox, vector log and revisions"] = same
    out["vector log rows"] = len(state["trigger"]["vector_log"])
    if not all(same.values()):
        raise AssertionError(f"the statement form does not do the trigger's work: {same}")
    for what, samples in (("add", adds), ("store batch", stores)):
        for name, values in samples.items():
            arr = np.array(values) * 1e6
            out[f"{what} p50 µs ({name})"] = round(float(np.percentile(arr, 50)), 1)
            out[f"{what} p99 µs ({name})"] = round(float(np.percentile(arr, 99)), 1)
        for form in ("statement", "none"):
            out[f"{what}: trigger / {form}"] = round(
                out[f"{what} p50 µs (trigger)"] / out[f"{what} p50 µs ({form})"], 2
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--memories", type=int, default=2)
    args = parser.parse_args()
    result = run(args.messages, args.batch, args.memories)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    write_json(Path(__file__).parent / "results" / "trigger_work.json", result)


if __name__ == "__main__":
    main()
