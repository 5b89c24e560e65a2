"""The distances a vector search ranks by, and the score each one reports.

A model is registered with one distance (``pgmem.embedding_models.distance``, migration 0015): its HNSW
index uses that distance's operator class and every search of it ranks by that distance. Scores are
what LangGraph's ``PostgresStore`` reports for the same ``distance_type`` (higher is closer):

==================  ==========================  ====================================================
distance            pgvector operator           score (``SearchHit.distance`` is the operator's value)
==================  ==========================  ====================================================
``cosine``          ``<=>`` (cosine distance)   ``1 - distance``: the cosine similarity, in [-1, 1]
``l2``              ``<->`` (Euclidean)         ``-distance``: the negated Euclidean distance, <= 0
``inner_product``   ``<#>`` (negative product)  ``-distance``: the inner product itself
==================  ==========================  ====================================================
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal, LiteralString

from pgmem.errors import InvalidInput

__all__ = [
    "DEFAULT_DISTANCE",
    "DISTANCES",
    "Distance",
    "check_distance",
    "check_threshold",
    "distance_of",
    "max_distance",
    "opclass",
    "operator",
    "score_of",
    "score_sql",
]

Distance = Literal["cosine", "l2", "inner_product"]
#: The names LangGraph's ``distance_type`` uses, which pgmem takes as they are.
DISTANCES: Final[tuple[Distance, ...]] = ("cosine", "l2", "inner_product")
DEFAULT_DISTANCE: Final[Distance] = "cosine"

_OPERATORS: Final[dict[str, LiteralString]] = {"cosine": "<=>", "l2": "<->", "inner_product": "<#>"}
_OPCLASSES: Final[dict[str, LiteralString]] = {
    "vector:cosine": "vector_cosine_ops",
    "vector:l2": "vector_l2_ops",
    "vector:inner_product": "vector_ip_ops",
    "halfvec:cosine": "halfvec_cosine_ops",
    "halfvec:l2": "halfvec_l2_ops",
    "halfvec:inner_product": "halfvec_ip_ops",
}
#: score = offset - distance (only cosine's score is shifted: 1 - cosine distance is the similarity).
_OFFSETS: Final[dict[str, float]] = {"cosine": 1.0, "l2": 0.0, "inner_product": 0.0}


def check_distance(distance: Any) -> Distance:
    """``distance`` if it is one of :data:`DISTANCES`, else :class:`InvalidInput`."""
    if not isinstance(distance, str) or distance not in _OPERATORS:
        raise InvalidInput(f"distance must be one of {', '.join(map(repr, DISTANCES))}, got {distance!r}")
    return distance  # type: ignore[return-value]


def operator(distance: str) -> LiteralString:
    """pgvector's distance operator (what an HNSW index of :func:`opclass` serves in ``ORDER BY``)."""
    return _OPERATORS[distance]


def opclass(kind: str, distance: str) -> LiteralString:
    """The HNSW operator class of ``kind`` (``vector`` or ``halfvec``) values for ``distance``."""
    return _OPCLASSES[f"{kind}:{distance}"]


def score_of(distance: str, value: float) -> float:
    """The score of a hit at ``value`` (the operator's result)."""
    return _OFFSETS[distance] - value


def distance_of(distance: str, score: float) -> float:
    """The operator's value of a hit scored ``score`` (the inverse of :func:`score_of`)."""
    return _OFFSETS[distance] - score


def score_sql(distance: str, column: LiteralString) -> LiteralString:
    """SQL of the score of a distance ``column``."""
    return f"1 - {column}" if distance == "cosine" else f"-{column}"


def max_distance(distance: str, threshold: float | None) -> float:
    """The largest operator value a hit scoring at least ``threshold`` (checked for ``distance``) may have;
    infinity when there is no threshold."""
    bound = check_threshold(threshold, distance)
    return math.inf if bound is None else _OFFSETS[distance] - bound


def check_threshold(threshold: Any, distance: str | None = DEFAULT_DISTANCE) -> float | None:
    """A minimum score for ``distance``: a cosine similarity in [-1, 1], a negated Euclidean distance (at
    most 0), or any finite inner product (``distance`` None: any finite number, the distance being
    unknown yet); None is no threshold."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
        raise InvalidInput(f"threshold must be a finite number, got {threshold!r}")
    if distance == "cosine" and not -1.0 <= threshold <= 1.0:
        raise InvalidInput(f"threshold is a cosine similarity in [-1, 1], got {threshold}")
    if distance == "l2" and threshold > 0:
        raise InvalidInput(f"threshold is a negated Euclidean distance (l2 scores are <= 0), got {threshold}")
    return float(threshold)
