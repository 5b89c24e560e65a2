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
from pgmem.planning.search.vector import MESSAGE_COLUMNS, guard_sql, hits_sql

__all__ = ["FUSIONS", "check_fusion", "check_half_life", "hybrid_search_sql"]

#: How hybrid search fuses its two legs (:mod:`pgmem.planning.search`), the default first.
FUSIONS = ("convex", "rrf")


def check_fusion(fusion: str) -> str:
    if fusion not in FUSIONS:
        raise InvalidInput(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    return fusion


def check_half_life(half_life: timedelta | float | None) -> float | None:
    if half_life is None:
        return None
    seconds = half_life.total_seconds() if isinstance(half_life, timedelta) else half_life
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"half_life must be a positive duration, got {half_life!r}")
    return float(seconds)


def hybrid_search_sql(model: EmbeddingModel, f: SearchFilters, strategy: str) -> sql.Composed:
    """Vector and full-text rankings fused in one statement (:mod:`pgmem.planning.search`: convex or RRF
    fusion).

    Parameters: those of :func:`vector_search_sql` (``k`` here is each list's depth) plus ``text`` and
    ``scope_n`` (the keyword leg's, :func:`~pgmem.planning.search.keyword.keyword_hits_sql`), ``fusion``
    (``convex`` or ``rrf``), ``w_vector``, ``w_text``, ``rrf_k``, ``half_life`` (seconds or NULL) and
    ``limit``. Rows: ``(seq, id, …, created_at, distance, score, ok)``.
    """
    text_part = keyword_hits_sql(f)
    # closeness: the vector candidates' distances scaled to [0, 1] over the list (closest 1, farthest 0;
    # 1 when they are all equal), so any distance and any model's range of scores fuse alike.
    return sql.SQL(
        "WITH v AS MATERIALIZED ({hits}), "
        "vr AS (SELECT v.message_id AS id, row_number() OVER (ORDER BY v.distance, v.message_id) AS rank, v.distance, "
        "coalesce((max(v.distance) OVER () - v.distance) "
        "/ nullif(max(v.distance) OVER () - min(v.distance) OVER (), 0), 1) AS closeness FROM v), "
        "tr AS MATERIALIZED ({text_part}), "
        "fused AS (SELECT coalesce(vr.id, tr.id) AS id, "
        "CASE WHEN %(fusion)s::text = 'rrf' "
        "THEN coalesce(%(w_vector)s / (%(rrf_k)s + vr.rank), 0) + coalesce(%(w_text)s / (%(rrf_k)s + tr.rank), 0) "
        "ELSE coalesce(%(w_vector)s * vr.closeness, 0) + coalesce(%(w_text)s * tr.coverage, 0) END AS score, "
        "vr.distance FROM vr FULL JOIN tr ON tr.id = vr.id) "
        "SELECT {cols}, f.distance, f.score * CASE WHEN %(half_life)s::float8 IS NULL THEN 1 ELSE "
        "power(0.5, extract(epoch FROM now() - m.created_at) / %(half_life)s::float8) END AS score, {guard} AS ok "
        "FROM fused f JOIN pgmem.messages m ON m.namespace = %(ns)s AND m.id = f.id "
        "ORDER BY score DESC, m.id LIMIT %(limit)s"
    ).format(
        hits=hits_sql(model, f, strategy, model.param("q")),
        text_part=text_part,
        cols=sql.SQL(MESSAGE_COLUMNS),
        guard=guard_sql(model, f),
    )
