"""Hybrid search: the vector and keyword legs fused in one statement (convex or RRF fusion, see
:mod:`pgmem.planning.search`), and the checks of its arguments."""

from __future__ import annotations

import math
from datetime import timedelta

from psycopg import sql

from pgmem.errors import InvalidInput
from pgmem.planning.search.filters import SearchFilters
from pgmem.planning.search.keyword import keyword_hits_sql
from pgmem.planning.search.model import EmbeddingModel
from pgmem.planning.search.vector import MESSAGE_COLUMNS, fork_guard_sql, guard_sql, hits_sql

__all__ = ["FUSIONS", "LEGS", "check_fusion", "check_half_life", "hybrid_legs", "hybrid_search_sql"]

#: How hybrid search fuses its two legs (:mod:`pgmem.planning.search`), the default first.
FUSIONS = ("convex", "rrf")
#: Which legs a hybrid search runs: both, or the one whose weight is not 0 (:func:`hybrid_legs`).
LEGS = ("both", "vector", "text")


def check_fusion(fusion: str) -> str:
    if fusion not in FUSIONS:
        raise InvalidInput(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    return fusion


def hybrid_legs(w_vector: float, w_text: float) -> str:
    """The legs a hybrid search with these weights (checked: numbers in [0, 1000]) runs: a leg weighted 0
    runs not at all (``w_vector=0`` embeds no query); both 0 is :class:`pgmem.InvalidInput`."""
    for name, weight in (("w_vector", w_vector), ("w_text", w_text)):
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1000:
            raise InvalidInput(f"{name} must be a number in [0, 1000], got {weight!r}")
    if w_vector == 0 and w_text == 0:
        raise InvalidInput("hybrid search needs a leg weighted above 0: w_vector and w_text are both 0")
    return "text" if w_vector == 0 else "vector" if w_text == 0 else "both"


def check_half_life(half_life: timedelta | float | None) -> float | None:
    if half_life is None:
        return None
    seconds = half_life.total_seconds() if isinstance(half_life, timedelta) else half_life
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"half_life must be a positive duration, got {half_life!r}")
    return float(seconds)


def hybrid_search_sql(
    model: EmbeddingModel | None, f: SearchFilters, strategy: str, legs: str = "both"
) -> sql.Composed:
    """Vector and full-text rankings fused in one statement (:mod:`pgmem.planning.search`: convex or RRF
    fusion).

    Parameters: those of :func:`vector_search_sql` (``k`` here is each list's depth) plus ``text`` and
    ``scope_n`` (the keyword leg's, :func:`~pgmem.planning.search.keyword.keyword_hits_sql`), ``fusion``
    (``convex`` or ``rrf``), ``w_vector``, ``w_text``, ``rrf_k``, ``half_life`` (seconds or NULL) and
    ``limit``. Rows: ``(seq, id, …, created_at, distance, score, ok)``.

    ``legs``: ``both``, or the one leg whose weight is not 0 (``vector``, ``text``): a leg weighted 0 is
    left out of the statement, so it neither runs nor brings its candidates at score 0 (a ``text``
    statement needs no model, no query vector and no ``w_vector``; a ``vector`` one no ``text``).
    """
    if legs not in LEGS:
        raise ValueError(f"legs must be one of {LEGS}, got {legs!r}")
    vector_score = sql.SQL(
        "CASE WHEN %(fusion)s::text = 'rrf' THEN coalesce(%(w_vector)s / (%(rrf_k)s + vr.rank), 0) "
        "ELSE coalesce(%(w_vector)s * vr.closeness, 0) END"
    )
    text_score = sql.SQL(
        "CASE WHEN %(fusion)s::text = 'rrf' THEN coalesce(%(w_text)s / (%(rrf_k)s + tr.rank), 0) "
        "ELSE coalesce(%(w_text)s * tr.coverage, 0) END"
    )
    ctes: list[sql.Composable] = []
    if legs != "text":
        assert model is not None, "a vector leg needs its model"
        # closeness: the vector candidates' distances scaled to [0, 1] over the list (closest 1, farthest
        # 0; 1 when they are all equal), so any distance and any model's range of scores fuse alike.
        ctes.append(
            sql.SQL(
                "v AS MATERIALIZED ({hits}), "
                "vr AS (SELECT v.message_id AS id, row_number() OVER (ORDER BY v.distance, v.message_id) AS rank, "
                "v.distance, coalesce((max(v.distance) OVER () - v.distance) "
                "/ nullif(max(v.distance) OVER () - min(v.distance) OVER (), 0), 1) AS closeness FROM v)"
            ).format(hits=hits_sql(model, f, strategy, model.param("q")))
        )
    if legs != "vector":
        ctes.append(sql.SQL("tr AS MATERIALIZED ({})").format(keyword_hits_sql(f)))
    if legs == "both":
        fused = sql.SQL(
            "SELECT coalesce(vr.id, tr.id) AS id, {} + {} AS score, vr.distance FROM vr FULL JOIN tr ON tr.id = vr.id"
        ).format(vector_score, text_score)
    elif legs == "vector":
        fused = sql.SQL("SELECT vr.id, {} AS score, vr.distance FROM vr").format(vector_score)
    else:
        fused = sql.SQL("SELECT tr.id, {} AS score, NULL::float8 AS distance FROM tr").format(text_score)
    return sql.SQL(
        "WITH {ctes}, fused AS MATERIALIZED ({fused}) "
        "SELECT {cols}, f.distance, f.score * CASE WHEN %(half_life)s::float8 IS NULL THEN 1 ELSE "
        "power(0.5, extract(epoch FROM now() - m.created_at) / %(half_life)s::float8) END AS score, {guard} AS ok "
        # Each candidate's message by one index probe. Joined on fused's coalesce(vr.id, tr.id), whose rows
        # the planner cannot estimate, it hashed every message of the namespace (42 ms of 52 beside 200k
        # messages, for a memory of 50); inlined into a lateral probe, the coalesce of a full join's sides
        # made no index condition. Materialized, f.id is a plain column; OFFSET 0 keeps the probe a probe.
        "FROM fused f CROSS JOIN LATERAL (SELECT * FROM pgmem.messages AS x "
        "WHERE x.namespace = %(ns)s AND x.id = f.id OFFSET 0) AS m "
        "ORDER BY score DESC, m.id LIMIT %(limit)s"
    ).format(
        ctes=sql.SQL(", ").join(ctes),
        fused=fused,
        cols=sql.SQL(MESSAGE_COLUMNS),
        # text only: no model, so no switch to notice; the fork guard alone
        guard=fork_guard_sql(f) if model is None else guard_sql(model, f),
    )
