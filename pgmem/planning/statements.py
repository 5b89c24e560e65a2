"""Named SQL queries, parsed once from the ``sql/*.sql`` files (``-- name: x`` blocks), with shared fragments.

A file holds two kinds of blocks:

* ``-- name: x``: a statement, looked up by name (its comments are kept: they show in logs and reports).
* ``-- fragment: x``: a piece of SQL that statements include as ``{{x}}`` (a select list, a CTE, a
  lock key): something written once that several statements need word for word. The comment lines that
  open the block document it and are not part of it. ``sql/fragments.sql`` holds the fragments every file
  may use; a file's own fragments serve that file only.

Fragments are expanded when a file is loaded (once per process), so a statement stays one constant
string: psycopg prepares it as before and Postgres plans exactly what it planned when the text was
written out. A fragment takes no arguments (its ``%(name)s`` placeholders are the statement's
parameters) and may include other fragments; an unknown or circular reference fails the load. A
fragment's lines take the indentation of the line that includes it, so expanded statements read as if
written out.
"""

from __future__ import annotations

import functools
import re
from typing import LiteralString

from pgmem.planning.resources import resource_path

__all__ = ["fragment", "fragments", "load", "parse"]

_BLOCK_RE = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE_RE = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")
#: The file of the fragments every query file may include.
SHARED = "fragments"


def _blocks(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """``({name: statement}, {name: fragment})`` of a file, before expansion."""
    parts = _BLOCK_RE.split(text)
    queries: dict[str, str] = {}
    pieces: dict[str, str] = {}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in queries or name in pieces:
            raise ValueError(f"{kind} {name!r} is defined twice")
        if kind == "name":
            queries[name] = body.strip().rstrip(";").strip()
            continue
        lines = body.strip().splitlines()
        while lines and lines[0].lstrip().startswith("--"):
            lines.pop(0)  # the fragment's documentation
        piece = "\n".join(lines).strip()
        if not piece:
            raise ValueError(f"fragment {name!r} is empty")
        if "--" in piece.splitlines()[-1] or piece.endswith(";"):
            # Included mid-line, a trailing comment would swallow the rest of the line.
            raise ValueError(f"fragment {name!r} must not end with a comment or a semicolon")
        pieces[name] = piece
    return queries, pieces


def _expand(text: str, pieces: dict[str, str], where: str, seen: tuple[str, ...] = ()) -> str:
    def include(match: re.Match[str]) -> str:
        start = match.string.rfind("\n", 0, match.start()) + 1
        if "--" in match.string[start : match.start()]:
            return match.group(0)  # in a comment: named, not included (a fragment's lines would leave it)
        name = match.group(1)
        if name not in pieces:
            raise ValueError(f"{where} includes an unknown fragment {{{{{name}}}}}")
        if name in seen:
            raise ValueError(f"fragment {name!r} includes itself ({' -> '.join((*seen, name))})")
        body = _expand(pieces[name], pieces, f"fragment {name!r}", (*seen, name))
        line = match.string[start : match.start()]
        return body.replace("\n", "\n" + line[: len(line) - len(line.lstrip())])

    return _INCLUDE_RE.sub(include, text)


def parse(text: str, shared: dict[str, str] | None = None) -> dict[str, LiteralString]:
    """Split a file of ``-- name: x`` blocks into ``{name: statement}`` (comments kept; trailing ``;``
    dropped), its ``{{fragment}}`` references expanded from the file's own fragments and ``shared``."""
    queries, own = _blocks(text)
    pieces = dict(shared or {})
    for name, piece in own.items():
        if name in pieces:
            raise ValueError(f"fragment {name!r} is already a shared fragment (sql/{SHARED}.sql)")
        pieces[name] = piece
    # Queries come from files shipped with the package, never from user input: LiteralString (mypy reads
    # it as str; no cast needed).
    return {name: _expand(q, pieces, f"query {name!r}") for name, q in queries.items()}


def _read(group: str) -> str:
    return (resource_path("sql") / f"{group}.sql").read_text(encoding="utf-8")


@functools.cache
def fragments() -> dict[str, LiteralString]:
    """The shared fragments (``sql/fragments.sql``), each expanded."""
    queries, pieces = _blocks(_read(SHARED))
    if queries:
        raise ValueError(f"sql/{SHARED}.sql holds fragments only, not queries ({', '.join(queries)})")
    return {name: _expand(p, pieces, f"fragment {name!r}", (name,)) for name, p in pieces.items()}


def fragment(name: str) -> LiteralString:
    """A shared fragment, for Python code that composes SQL (e.g. with ``psycopg.sql``).

    Example:
        >>> from psycopg import sql
        >>> sql.SQL("SELECT m.seq, {} FROM pgmem.messages AS m").format(sql.SQL(fragment("message_columns")))
    """
    try:
        return fragments()[name]
    except KeyError:
        raise KeyError(f"no fragment {name!r} in sql/{SHARED}.sql") from None


@functools.cache
def load(group: str) -> dict[str, LiteralString]:
    """The queries of ``sql/<group>.sql``."""
    return parse(_read(group), fragments())
