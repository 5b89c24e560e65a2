"""``pgmem export`` and ``pgmem import`` (issue 35): a namespace round-trips exactly into another database, and a
bad file imports nothing."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

import pgmem
from pgmem.embeddings import Precomputed
from tests.conftest import table_counts
from tests.integration.test_cli import run_cli

A = Precomputed("model-a", 3)
B = Precomputed("model-b", 4)


def _fill(dsn: str, namespace: str = "src") -> None:
    """Messages (metadata, tool calls, instruct_content), two memories sharing messages, summaries, vectors of
    two models, queue items in several states, items with a TTL."""
    with pgmem.connect(dsn, namespace=namespace) as client:
        client.vectors.enable("role:Alice", A)
        client.vectors.enable("role:Bob", B, distance="l2")
        shared = [
            pgmem.Message(
                content=f"shared {i} ünïcödé",
                role="assistant",
                cause_by="WriteCode",
                sent_from="Alice",
                send_to={"Bob", "Carol"},
                metadata={"n": i, "price": 1.10, "big": 12345678901234567890, "tags": ["x", None]},
                tool_calls=[{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                instruct_content={"kind": "plan", "steps": [1.5, 2.25e-7]},
            )
            for i in range(4)
        ]
        vectors_a = [[0.1 * (i + 1), -0.3, 1e-7 * (i + 1)] for i in range(4)]
        client.messages.add_many("role:Alice", shared, embeddings=vectors_a, model=A.model)
        vectors_b = [[0.2, 0.4 * (i + 1), -1.0, 3.0e-3] for i in range(4)]
        client.messages.add_many("role:Bob", shared, embeddings=vectors_b, model=B.model)
        own = [pgmem.Message(content=f"bob only {i}", role="user", tool_call_id=f"t{i}", name="bob") for i in range(3)]
        client.messages.add_many("role:Bob", own)  # no vectors: queued for model-b
        q = client.queues
        q.push_many("jobs", [pgmem.Message(content=f"job {i}") for i in range(4)], priority=1)
        claimed = q.claim("jobs", 2, worker="w1", lease=600)
        q.nack(claimed[0], error="boom", dead=True)
        q.push("later", pgmem.Message(content="delayed"), delay=3600, dedup_key="d1")
        client.items.put(("users", "u1"), "prefs", {"theme": "dark", "ratio": 0.30}, ttl=90.5)
        client.items.put(("users",), "plain", {"x": [1, 2.50]})
    with psycopg.connect(dsn, autocommit=True) as conn:  # summaries name entry seqs of the memory
        seqs = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM pgmem.memory_entries WHERE namespace = %s AND memory = 'role:Bob' ORDER BY seq",
                (namespace,),
            )
        ]
        # JSON numbers as written (jsonb keeps 1.10 and 1E+2 as 1.10 and 100): exactly the same after the trip.
        conn.execute("SELECT set_config('pgmem.admin', 'on', false)")
        conn.execute(
            'UPDATE pgmem.messages SET metadata = metadata || \'{"exact": 1.10, "e": 1E+2}\' WHERE namespace = %s',
            (namespace,),
        )
    with pgmem.connect(dsn, namespace=namespace) as client:
        client.summaries.add(
            "role:Bob", level=1, first_seq=seqs[0], last_seq=seqs[3], content="s1", source_chars=40, source_tokens=10
        )
        client.summaries.add(
            "role:Bob", level=1, first_seq=seqs[4], last_seq=seqs[5], content="s2", source_chars=20, source_tokens=5
        )


def _fields(message: pgmem.Message) -> tuple[object, ...]:
    return tuple(getattr(message, f) for f in pgmem.Message.FIELDS)


def _export(dsn: str, path: Path, *args: str) -> list[str]:
    run_cli("export", "--dsn", dsn, "-n", "src", "-o", str(path), *args)
    return path.read_text(encoding="utf-8").splitlines()


def _no_time(lines: list[str]) -> list[str]:
    header = json.loads(lines[0])
    del header["exported_at"]
    return [json.dumps(header), *lines[1:]]


def test_a_namespace_round_trips_exactly_into_another_database(dsn: str, empty_dsn: str, tmp_path: Path) -> None:
    from pgmem.ops import migrate

    _fill(dsn)
    first = _export(dsn, tmp_path / "a.jsonl")
    types = [json.loads(line)["type"] for line in first]
    assert types[0] == "header" and {"memory", "message", "entry", "embedding", "memory_model", "summary"} <= set(types)
    assert {"queue_item", "item"} <= set(types)
    migrate.upgrade(empty_dsn)
    out = run_cli("import", "--dsn", empty_dsn, str(tmp_path / "a.jsonl")).stdout
    assert "imported" in out and "'src'" in out
    second = _export(empty_dsn, tmp_path / "b.jsonl")
    assert _no_time(second) == _no_time(first)
    with pgmem.connect(dsn, namespace="src") as one, pgmem.connect(empty_dsn, namespace="src") as two:
        for memory in ("role:Alice", "role:Bob"):
            assert [_fields(m) for m in one.messages.last(memory)] == [_fields(m) for m in two.messages.last(memory)]
            assert one.messages.count(memory) == two.messages.count(memory)
        hits = [
            [
                (h.message.id, round(h.score, 6))
                for h in c.vectors.search(vector=[0.1, -0.3, 0.0], memory="role:Alice", k=3)
            ]
            for c in (one, two)
        ]
        assert hits[0] == hits[1] and hits[0]
        assert one.vectors.pending() == two.vectors.pending()
        assert one.items.get(("users", "u1"), "prefs") is not None


def test_export_of_some_memories_and_import_into_another_namespace(dsn: str, tmp_path: Path) -> None:
    _fill(dsn)
    lines = _export(dsn, tmp_path / "alice.jsonl", "--memory", "role:Alice")
    records = [json.loads(line) for line in lines[1:]]
    assert {r["row"]["key"] for r in records if r["type"] == "memory"} == {"role:Alice"}
    assert sum(r["type"] == "message" for r in records) == 4  # the messages Alice holds, not Bob's own
    assert not {"queue_item", "item"} & {r["type"] for r in records}
    run_cli("import", "--dsn", dsn, "-n", "copy", str(tmp_path / "alice.jsonl"))
    with pgmem.connect(dsn, namespace="src") as one:
        two = one.with_namespace("copy")
        assert [_fields(m) for m in one.messages.last("role:Alice")] == [
            _fields(m) for m in two.messages.last("role:Alice")
        ]
        assert two.vectors.models("role:Alice") == {"model-a": "active"}
    missing = run_cli("export", "--dsn", dsn, "-n", "src", "--memory", "nobody", check=False)
    assert missing.returncode == 1 and "NotFound" in missing.stderr


def _header(**changes: object) -> str:
    from pgmem.revision import SCHEMA_REVISION

    header = {"type": "header", "format": 1, "revision": SCHEMA_REVISION, "namespace": "src", **changes}
    return json.dumps(header)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("{not json", "not JSON"),
        ('{"type": "gadget", "row": {}}', "unknown type 'gadget'"),
        ('{"type": "memory", "row": {"key": "m"}}', "missing field(s) created_at, kind"),
        ("WRONG_DIMENSION", "the vector has 2 dimensions"),
    ],
    ids=["not json", "unknown type", "missing field", "wrong dimension"],
)
def test_a_bad_line_is_named_and_nothing_is_imported(dsn: str, tmp_path: Path, bad: str, says: str) -> None:
    _fill(dsn)
    lines = _export(dsn, tmp_path / "a.jsonl")
    if bad == "WRONG_DIMENSION":
        at = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "embedding")
        record = json.loads(lines[at])
        record["vector"] = record["vector"][:2]
        bad = json.dumps(record)
    else:
        at = len(lines) - 3  # late in the file: rows before it were inserted, and must go
    lines[at] = bad
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = table_counts(dsn)
    result = run_cli("import", "--dsn", dsn, "-n", "other", str(tmp_path / "bad.jsonl"), check=False)
    assert result.returncode == 1 and "InvalidInput" in result.stderr, result.stderr
    said = " ".join(result.stderr.split())
    assert f"line {at + 1}:" in said and says in said, said
    assert table_counts(dsn) == before


def test_a_newer_format_and_existing_rows_are_refused_whole(dsn: str, tmp_path: Path) -> None:
    _fill(dsn)
    newer = tmp_path / "newer.jsonl"
    newer.write_text(_header(format=99) + "\n", encoding="utf-8")
    result = run_cli("import", "--dsn", dsn, "-n", "other", str(newer), check=False)
    assert result.returncode == 1 and "line 1:" in result.stderr and "newer pgmem" in result.stderr
    _export(dsn, tmp_path / "a.jsonl")
    before = table_counts(dsn)
    again = run_cli("import", "--dsn", dsn, str(tmp_path / "a.jsonl"), check=False)  # into src itself
    said = " ".join(again.stderr.split())
    assert again.returncode == 1 and "Conflict" in said and "line 2: memory with key 'role:Alice' is already in" in said
    assert table_counts(dsn) == before


def _item_ids(dsn: str, namespace: str) -> tuple[dict[tuple[str, ...], int], list[tuple[tuple[str, ...], int]]]:
    """Each current item's id by (path, key), and each version's (path, key, created_at) with its item_id."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('pgmem.admin', 'on', false)")
        items = conn.execute("SELECT path, key, id FROM pgmem.items WHERE namespace = %s", (namespace,)).fetchall()
        versions = conn.execute(
            "SELECT path, key, created_at, item_id FROM pgmem.item_history WHERE namespace = %s ORDER BY valid_from",
            (namespace,),
        ).fetchall()
    return (
        {(*p, k): int(i) for p, k, i in items},
        [((*p, k, c.isoformat()), int(i)) for p, k, c, i in versions],
    )


def _item_versions(dsn: str) -> list[datetime]:
    """Items of namespace src with versions: one replaced twice, one deleted (with a TTL), one deleted and
    re-created; returns each version's time."""
    times = []
    with pgmem.connect(dsn, namespace="src") as client:
        items = client.items

        def put(path: tuple[str, ...], key: str, value: dict[str, object], ttl: float | None = None) -> None:
            items.put(path, key, value, ttl=ttl)
            times.append(items.get(path, key).updated_at)  # type: ignore[union-attr]

        for lang in ("fr", "de", "it"):
            put(("users", "u1"), "prefs", {"lang": lang, "n": 1.10})
        put(("users", "u2"), "gone", {"was": "here"}, ttl=600)
        items.delete(("users", "u2"), "gone")
        put(("users", "u1"), "again", {"life": 1})
        items.delete(("users", "u1"), "again")
        put(("users", "u1"), "again", {"life": 2})
    return times


def _as_of(c: pgmem.Client, at: datetime) -> object:
    """What items.get_many, get, search and list_paths answer as of ``at``."""
    got = c.items.get_many(("users", "u1"), ["prefs", "again"], as_of=at)
    gone = c.items.get(("users", "u2"), "gone", as_of=at)
    hits = c.items.search(("users",), as_of=at)
    return (
        [(r.key, r.value, r.created_at, r.updated_at) if r else None for r in got],
        gone and (gone.value, gone.created_at),
        sorted((tuple(h.path), h.key, json.dumps(h.value, sort_keys=True)) for h in hits),
        sorted(map(tuple, c.items.list_paths(as_of=at))),
    )


def _lifetimes_named(dsn: str, namespace: str) -> None:
    """The imported versions name the target's item ids: a living item's own, and one new id per deleted
    lifetime (of no current item)."""
    current, versions = _item_ids(dsn, namespace)
    assert [i for key, i in versions if key[:3] == ("users", "u1", "prefs")] == [current[("users", "u1", "prefs")]] * 2
    lifetimes = {key: i for key, i in versions if key[:3] != ("users", "u1", "prefs")}  # gone, again (life 1)
    assert len(lifetimes) == len(set(lifetimes.values())) == 2 and not set(lifetimes.values()) & set(current.values())


def test_items_as_of_answer_after_an_import_as_before_the_export(dsn: str, empty_dsn: str, tmp_path: Path) -> None:
    """An item's versions (pgmem.item_history) travel: items.get, get_many, search and list_paths as of each
    version's time answer in the copy as in the original, a deleted item's versions included; the copy's
    versions name the copy's item ids, and exported again the copy gives the same file."""
    from pgmem.ops import migrate

    times = _item_versions(dsn)
    first = _export(dsn, tmp_path / "a.jsonl")
    types = [json.loads(line)["type"] for line in first]
    assert types.count("item_history") == 4 and types.index("item_history") > types.index("item")
    migrate.upgrade(empty_dsn)
    run_cli("import", "--dsn", empty_dsn, str(tmp_path / "a.jsonl"))
    assert _no_time(_export(empty_dsn, tmp_path / "b.jsonl")) == _no_time(first)
    with pgmem.connect(dsn, namespace="src") as one, pgmem.connect(empty_dsn, namespace="src") as two:
        for at in times:
            assert _as_of(one, at) == _as_of(two, at), at
        assert two.items.get(("users", "u1"), "prefs", as_of=times[0]).value == {"lang": "fr", "n": 1.10}  # type: ignore[union-attr]
        assert two.items.get(("users", "u2"), "gone", as_of=times[3]).value == {"was": "here"}  # type: ignore[union-attr]
    _lifetimes_named(empty_dsn, "src")


def test_a_file_of_the_older_layout_still_imports_its_item_versions(dsn: str, tmp_path: Path) -> None:
    """A format-1 file written before item versions left out their item_id (the source's ids) and came after
    the items: the ids are ignored, the versions imported, and named after the target's items all the same."""
    times = _item_versions(dsn)
    lines = _export(dsn, tmp_path / "a.jsonl")
    records = [json.loads(line) for line in lines]
    versions = [r for r in records if r["type"] == "item_history"]
    for n, r in enumerate(versions):
        r["row"]["item_id"] = 9_000_000 + n  # no such item anywhere
    rest = [r for r in records if r["type"] != "item_history"]
    items_from = next(i for i, r in enumerate(rest) if r["type"] == "item")
    older = rest[:items_from] + versions + rest[items_from:]  # the versions before the items, as plan() had them
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in older), encoding="utf-8")
    run_cli("import", "--dsn", dsn, "-n", "old", str(tmp_path / "old.jsonl"))
    with pgmem.connect(dsn, namespace="src") as one:
        two = one.with_namespace("old")
        for at in times:
            assert _as_of(one, at) == _as_of(two, at), at
    _lifetimes_named(dsn, "old")
