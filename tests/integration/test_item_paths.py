"""Item paths keyed as one text (migration 0026): ``pgmem.path_key`` is one-to-one with the paths, ordered
as they are, and a prefix is one range of it; get, list_paths, search, forget and the as-of reads find by
it under row-level security, each with an index condition on it.

Differential against LangGraph's own ``InMemoryStore`` on labels made to break an encoding (the escape
characters U+0001 and U+0002, a label that is another's prefix, non-ASCII, ``*``)."""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgmem

LABELS = ["a", "b", "ab", "a\x01", "a\x01b", "a\x02", "\x01", "\x02", "\x02\x01", "é", "😀", "*"]
PATHS = sorted({p for n in (1, 2, 3) for p in itertools.product(LABELS[:6] if n == 3 else LABELS, repeat=n)})


def _expected_paths(prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    """What list_paths(prefix=) returns: the paths starting with the prefix's labels ("*": any one)."""
    return sorted(
        p for p in PATHS if len(p) >= len(prefix) and all(x == "*" or x == y for x, y in zip(prefix, p, strict=False))
    )


@pytest.fixture
def filled(dsn: str) -> str:
    with pgmem.connect(dsn, namespace="paths") as client:
        client.items.put_many([{"path": p, "key": "k", "value": {"p": list(p)}} for p in PATHS])
    return dsn


def test_path_key_is_one_to_one_and_ordered_as_the_paths(filled: str) -> None:
    with psycopg.connect(filled) as conn:
        keys = conn.execute(
            "SELECT pgmem.path_key(p) FROM unnest(%s::text[]) WITH ORDINALITY AS x(j, n), "
            "LATERAL (SELECT array_agg(e ORDER BY i) AS p FROM jsonb_array_elements_text(j::jsonb) "
            "WITH ORDINALITY AS t(e, i)) AS a ORDER BY n",
            ([json.dumps(list(p)) for p in PATHS],),
        ).fetchall()
    assert len({k for (k,) in keys}) == len(PATHS)
    # Python orders strings by code point, as collation "C" orders UTF-8: the keys sort as the paths do.
    assert sorted(range(len(PATHS)), key=lambda i: keys[i][0]) == list(range(len(PATHS)))


@pytest.mark.parametrize("prefix", [(), ("a",), ("a\x01",), ("a", "b"), ("\x02",), ("a", "*"), ("*", "a\x01"), ("z",)])
def test_list_paths_and_search_under_a_prefix(filled: str, prefix: tuple[str, ...]) -> None:
    with pgmem.connect(filled, namespace="paths") as client:
        assert client.items.list_paths(prefix=prefix, limit=1000) == _expected_paths(prefix)
        if "*" not in prefix:  # a search's prefix is literal
            found = client.items.search(prefix, limit=1000)
            assert sorted(tuple(h.path) for h in found) == _expected_paths(prefix)
        for path in _expected_paths(prefix)[:5]:
            (item,) = client.items.get_many(path, ["k"])
            assert item is not None and tuple(item.value["p"]) == path


def _listed(
    prefix: tuple[str, ...], suffix: tuple[str, ...], depth: int | None, paths: list[tuple[str, ...]] = PATHS
) -> list[tuple[str, ...]]:
    def fits(p: tuple[str, ...], cond: tuple[str, ...]) -> bool:
        return len(p) >= len(cond) and all(x == "*" or x == y for x, y in zip(cond, p, strict=False))

    kept = {p[:depth] if depth else p for p in paths if fits(p, prefix) and fits(p[::-1], suffix[::-1])}
    return sorted(kept)


#: (prefix, suffix, max_depth) of the paging tests: cuts at each depth, "*" labels, a suffix, no cut.
CUTS = pytest.mark.parametrize(
    ("prefix", "suffix", "depth"),
    [((), (), 1), ((), (), 2), (("a",), (), 2), ((), ("b",), 1), (("a", "*"), ("\x02",), 2), (("*",), ("é",), None)],
)
#: (limit, offset) of the pages read: all, the first, one inside, one across, one past the end (added).
PAGES = [(1000, 0), (3, 0), (3, 2), (7, 5)]


@CUTS
def test_list_paths_pages_of_cut_and_filtered_paths(
    filled: str, prefix: tuple[str, ...], suffix: tuple[str, ...], depth: int | None
) -> None:
    """A walk that skips a listed path's subtree (max_depth) and stops after a page: every page, against
    the paths computed here."""
    expected = _listed(prefix, suffix, depth)
    with pgmem.connect(filled, namespace="paths") as client:
        for limit, offset in [*PAGES, (5, len(expected))]:
            got = client.items.list_paths(prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset)
            assert got == expected[offset : offset + limit], (limit, offset)


@CUTS
def test_list_paths_as_of_pages_through_both_tables(
    filled: str, prefix: tuple[str, ...], suffix: tuple[str, ...], depth: int | None
) -> None:
    """The as-of walk steps through the keys of the items and of their history at once: after the mark,
    a third of the paths lost their items (only the history has them) and new paths came (only the items,
    written too late to count, some inside subtrees a cut skips). Every page as of the mark lists what was
    there, and as of now what is there."""
    with pgmem.connect(filled, namespace="paths") as client, psycopg.connect(filled, autocommit=True) as clock:
        at = _clock(clock)
        gone = PATHS[::3]
        client.items.put_many([{"path": p, "key": "k", "value": None} for p in gone])
        later = sorted({(*p, "new") for p in PATHS if len(p) < 3} | {("new",), ("\x01", "\x01")} - set(PATHS))
        client.items.put_many([{"path": p, "key": "k", "value": {}} for p in later])
        now = sorted(set(PATHS) - set(gone) | set(later))
        for when, paths in ((at, PATHS), (_clock(clock), now)):
            expected = _listed(prefix, suffix, depth, paths)
            for limit, offset in [*PAGES, (5, len(expected))]:
                got = client.items.list_paths(
                    prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset, as_of=when
                )
                assert got == expected[offset : offset + limit], (when, limit, offset)


def _clock(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def test_list_paths_skips_expired_paths_and_lists_the_subtree_of_a_live_one(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="paths-ttl") as client:
        client.items.put_many([{"path": ("a",), "key": "k", "value": {}, "ttl": 1e-6}])  # expires at once
        client.items.put_many(
            [{"path": ("a", "b"), "key": "k", "value": {}}, {"path": ("c",), "key": "k", "value": {}}]
        )
        assert client.items.list_paths(max_depth=1, omit_expired=True) == [("a",), ("c",)]
        assert client.items.list_paths(omit_expired=True) == [("a", "b"), ("c",)]
        assert client.items.list_paths(max_depth=1, omit_expired=True, limit=1) == [("a",)]


def test_the_same_answers_as_langgraphs_in_memory_store(filled: str) -> None:
    """The upstream store and pgmem's adapter, the same puts and reads (LangGraph's labels: no "." and no
    empty one, which both refuse)."""
    memory = pytest.importorskip("langgraph.store.memory")
    from pgmem.integrations.langgraph import PgmemStore

    upstream = memory.InMemoryStore()
    with pgmem.connect(filled, namespace="paths-lg") as client:
        ours = PgmemStore(client)
        paths = [p for p in PATHS if "*" not in p]
        for store in (upstream, ours):
            for p in paths:
                store.put(p, "k", {"p": list(p)})
        for prefix in [("a",), ("a\x01",), ("a", "b"), ("\x02",), ("a", "*"), ("é",), ("nothing",)]:
            assert ours.list_namespaces(prefix=prefix, limit=1000) == sorted(
                upstream.list_namespaces(prefix=prefix, limit=1000)
            ), prefix
            if "*" not in prefix:
                theirs: Any = upstream.search(prefix, limit=1000)
                assert sorted(i.namespace for i in ours.search(prefix, limit=1000)) == sorted(
                    i.namespace for i in theirs
                ), prefix
        for p in paths[:20]:
            got, expected = ours.get(p, "k"), upstream.get(p, "k")
            assert got is not None and expected is not None and got.value == expected.value


def test_forget_under_a_prefix_takes_the_range_and_nothing_beside_it(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="paths-forget") as client:
        client.items.put_many([{"path": p, "key": "k", "value": {}} for p in PATHS])
        client.items.forget(("a",))
        assert client.items.list_paths(limit=1000) == [p for p in PATHS if p[0] != "a"]
        client.items.forget(("a\x01",), keys=["k"])  # one path's key: not ("a\x01", ...)
        assert client.items.list_paths(prefix=("a\x01",), limit=1000) == [
            p for p in PATHS if p[0] == "a\x01" and len(p) > 1
        ]


def test_reads_find_the_path_by_an_index_condition(filled: str) -> None:
    """As the application's role (row-level security binds it): the path's key is an index condition of a
    get and of a prefix's list_paths (text[]'s comparisons, not leakproof, never were)."""
    from pgmem.planning import statements

    q = statements.load("items")
    with psycopg.connect(filled) as conn:
        conn.execute("SET ROLE pgmem_app")
        conn.execute("SELECT set_config('pgmem.namespace', 'paths', false)")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN " + q["get"], {"ns": "paths", "path": ["a", "b"], "keys": ["k"], "omit_expired": False}
            ).fetchall()
        )
        assert "path_key = pgmem.path_key" in plan or "path_key = '" in plan, plan
        params = {"ns": "paths", "prefix": ["a"], "fixed": ["a"], "suffix": None, "max_depth": None}
        params |= {"omit_expired": False, "limit": 10, "offset": 0}
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + q["list_paths"], params).fetchall())
        # The first probe at the range's start, each next one past the path before (a join's parameter).
        assert plan.count("Index Cond: ((namespace = 'paths'::text) AND (path_key >= ") == 2, plan
