"""Named SQL queries, parsed once from the ``sql/*.sql`` files (``-- name: x`` blocks)."""

from __future__ import annotations

import functools
import re
from typing import LiteralString, cast

from pgmem.planning.resources import resource_path

_NAME_RE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, LiteralString]:
    """Split a file of ``-- name: x`` blocks into ``{name: statement}`` (comments kept; trailing ``;`` dropped)."""
    parts = _NAME_RE.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        statement = body.strip().rstrip(";").strip()
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        # Queries come from files shipped with the package, never from user input.
        queries[name] = cast(LiteralString, statement)
    return queries


@functools.cache
def load(group: str) -> dict[str, LiteralString]:
    """The queries of ``sql/<group>.sql``."""
    return parse((resource_path("sql") / f"{group}.sql").read_text(encoding="utf-8"))
