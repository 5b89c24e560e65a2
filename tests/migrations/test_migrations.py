"""Migrations: one schema declaration, no drift, concurrent first starts, downgrade, the CLI.

``migrations/versions`` starts with one baseline (revision ``0001``, the schema as of 2026-11-24); each
later change is a revision of its own. tests/migrations/test_database_code.py checks the views, functions
and triggers the migrations create against ``sql/``.

The drift check configures alembic's comparison the way ``migrations/env.py`` does (every schema
reflected, the same ``include_object`` filter, the version table in ``pgmem``) and compares the migrated
database with ``pgmem.ops.schema.metadata``: the migrations and the declaration must describe the same schema.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import queue
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Column, MetaData, Text

import pgmem
from pgmem.ops import migrate, server
from pgmem.ops.schema import SCHEMA, metadata
from pgmem.revision import SCHEMA_REVISION

ROOT = Path(__file__).resolve().parents[2]
CTX = multiprocessing.get_context("spawn")


def _include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    # The same filter as migrations/env.py (which cannot be imported: importing it runs the migrations).
    if type_ == "table" and getattr(obj, "schema", None) not in (SCHEMA, None):
        return False
    if type_ == "table" and name == "alembic_version":
        return False
    # Per-model HNSW indexes are created at run time when a model is first used (pgmem.vectors, client.items).
    if type_ == "index" and reflected and (name or "").startswith(("embeddings_hnsw_m", "item_vectors_hnsw_m")):
        return False
    return True


def schema_diff(dsn: str, target: MetaData = metadata) -> list[Any]:
    """What alembic autogenerate would emit to bring the database at ``dsn`` to ``target``."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = migrate.engine_for(dsn)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "target_metadata": target,
                    "include_schemas": True,
                    "include_object": _include_object,
                    "version_table_schema": SCHEMA,
                    "compare_type": True,
                    "compare_server_default": True,
                },
            )
            return list(compare_metadata(context, target))
    finally:
        engine.dispose()


def _alembic(dsn: str, command_name: str, revision: str) -> None:
    from alembic import command

    cfg = migrate.alembic_config()
    engine = migrate.engine_for(dsn)
    try:
        with engine.connect() as connection:
            cfg.attributes["connection"] = connection
            getattr(command, command_name)(cfg, revision)
            connection.commit()
    finally:
        engine.dispose()


def _versions(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT version_num FROM pgmem.alembic_version")]


def _tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'pgmem'")}


def test_autogenerate_finds_no_drift_after_upgrade_head(empty_dsn: str) -> None:
    assert migrate.upgrade(empty_dsn) == migrate.head_revision()
    assert schema_diff(empty_dsn) == []
    assert _versions(empty_dsn) == [migrate.head_revision()]


def test_the_schema_revision_pgmem_needs_is_alembic_head() -> None:
    """connect() compares the database's revision with pgmem.revision without loading alembic: a new
    migration must update it."""
    assert SCHEMA_REVISION == migrate.head_revision()


def test_revisions_import_nothing_of_pgmem() -> None:
    """A revision is a snapshot: it inlines its SQL and never imports pgmem (nor reads sql/ through it),
    whose next edit would change what an old revision creates on an empty database."""
    versions = sorted((ROOT / "migrations" / "versions").glob("*.py"))
    assert versions
    for path in versions:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n == "pgmem" or n.startswith("pgmem.")], path.name


def test_storage_parameters_match_the_schema(empty_dsn: str) -> None:
    """Autogenerate does not compare storage parameters: the migrations must set what schema.py declares
    (fillfactor, the queue's autovacuum settings)."""
    migrate.upgrade(empty_dsn)
    declared = {
        name: {f"{key}={value}" for key, value in table.dialect_options["postgresql"]["with"].items()}
        for name, table in metadata.tables.items()
        if table.dialect_options["postgresql"]["with"]
    }
    assert declared, "schema.py declares storage parameters for the queue tables"
    with psycopg.connect(empty_dsn) as conn:
        for name, options in declared.items():
            row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (name,)).fetchone()
            assert row is not None and set(row[0] or []) == options, name


def test_the_embedded_server_visits_databases_often(admin_dsn: str) -> None:
    if not os.environ.get("PGMEM_TEST_HOME"):
        pytest.skip("the tests run on a server pgmem did not start")
    with psycopg.connect(admin_dsn) as conn:
        for name, value in server.EMBEDDED_SETTINGS.items():
            row = conn.execute("SELECT setting || coalesce(unit, '') FROM pg_settings WHERE name = %s", (name,))
            assert row.fetchone() == (value,)


def test_the_drift_check_sees_a_difference(dsn: str) -> None:
    """Guards the test above against comparing nothing (e.g. a filter that drops every table)."""
    drifted = MetaData(schema=SCHEMA)
    for table in metadata.tables.values():
        table.to_metadata(drifted)
    drifted.tables[f"{SCHEMA}.messages"].append_column(Column("drift", Text, nullable=True))
    diff = schema_diff(dsn, drifted)
    assert [(d[0], d[1], d[2], d[3].name) for d in diff] == [("add_column", SCHEMA, "messages", "drift")]


def test_downgrade_to_base_then_upgrade_head(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1) as client:
        client.messages.add("team", pgmem.Message(content="before the downgrade"))
    _alembic(dsn, "downgrade", "base")
    assert _tables(dsn) == {"alembic_version"}
    assert _versions(dsn) == []
    _alembic(dsn, "upgrade", "head")
    assert _versions(dsn) == [migrate.head_revision()]
    assert schema_diff(dsn) == []
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1, migrate=False) as client:
        assert client.messages.count("team") == 0
        client.messages.add("team", pgmem.Message(content="after the upgrade"))
        assert [m.content for m in client.messages.last("team")] == ["after the upgrade"]


_ARCHIVED = (
    "SELECT namespace, id, queue, message_id, priority, enqueued_at, claimed_at, acked_at, attempts, claimed_by,"
    " dedup_key, batch FROM pgmem.queue_archive ORDER BY id"
)
# The same rows read from the batches another way: all arrays unnested in parallel.
_UNNESTED = (
    "SELECT b.namespace, i.id, b.queue, i.message_id, i.priority, i.enqueued_at, i.claimed_at, b.acked_at,"
    " i.attempts, i.claimed_by, i.dedup_key, b.batch FROM pgmem.queue_archive_batches AS b"
    " CROSS JOIN LATERAL unnest(b.ids, b.message_ids, b.priorities, b.enqueued_at, b.claimed_at, b.attempts,"
    " b.claimed_by, b.dedup_keys) AS i(id, message_id, priority, enqueued_at, claimed_at, attempts, claimed_by,"
    " dedup_key) ORDER BY i.id"
)


def test_the_queue_archive_view_has_one_row_per_archived_item(dsn: str) -> None:
    """The archive stores one row per acknowledgement and queue, the items in arrays; the view
    pgmem.queue_archive (the baseline's) gives one row per item, each array read at the item's position."""
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1) as client:
        q = client.queues
        q.push_many("jobs", [pgmem.Message(content=f"j{i}") for i in range(6)], dedup_keys=["k0"] + [None] * 5)
        q.push("other", pgmem.Message(content="o"))
        q.ack(q.claim("jobs", n=3, worker="w1") + q.claim("other"))  # one statement, two queues: two batches
        held = q.claim("jobs", n=1, worker="w2")
        q.ack(q.claim("jobs", n=1, ack=held))
        q.take("jobs")
    with psycopg.connect(dsn) as conn:
        archived = conn.execute(_ARCHIVED).fetchall()
        unnested = conn.execute(_UNNESTED).fetchall()
        batches = conn.execute("SELECT queue, cardinality(ids) FROM pgmem.queue_archive_batches").fetchall()
    assert len(archived) == 7 and [r[10] for r in archived].count("k0") == 1
    assert sorted(batches) == [("jobs", 1), ("jobs", 1), ("jobs", 1), ("jobs", 3), ("other", 1)]
    assert archived == unnested


def test_revision_0011_copies_the_existing_archive_into_its_refs(dsn: str) -> None:
    """pgmem.queue_archive_refs (0011) names every message of the archive rows written before it: the
    downgrade drops it, the upgrade fills it from the batches, and a removal then keeps an archived message."""
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1) as client:
        q = client.queues
        q.push_many("jobs", [pgmem.Message(id=f"j{i}", content=f"j{i}") for i in range(5)])
        q.push("jobs", pgmem.Message(id="j0", content="j0"))  # the same message twice in one batch
        q.ack(q.claim("jobs", n=4))
        q.take("jobs", 2)
        client.messages.add("chat", pgmem.Message(id="j1", content="j1"))
    _alembic(dsn, "downgrade", "0010")
    assert "queue_archive_refs" not in _tables(dsn)
    _alembic(dsn, "upgrade", "head")
    with psycopg.connect(dsn) as conn:
        refs = conn.execute("SELECT namespace, message_id, batch FROM pgmem.queue_archive_refs").fetchall()
        named = conn.execute(
            "SELECT DISTINCT namespace, m, batch FROM pgmem.queue_archive_batches, unnest(message_ids) AS m"
        ).fetchall()
    assert sorted(refs) == sorted(named) and {r[1] for r in refs} == {f"j{i}" for i in range(5)}
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1, migrate=False) as client:
        assert client.messages.delete("chat", "j1")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.messages WHERE id = 'j1'").fetchone() == (1,)


def test_revision_0026_keys_the_items_and_history_there_by_their_paths(dsn: str) -> None:
    """Items and versions written before 0026 get their path_key on the upgrade (the primary keys lead
    with it), and are found by it; the downgrade puts the path back in front, the items unchanged."""
    paths = [("a",), ("a", "b"), ("a\x01",), ("a\x02", "é"), ("b",)]
    _alembic(dsn, "downgrade", "0025")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n, path in enumerate(paths):
            conn.execute(
                "INSERT INTO pgmem.items (namespace, path, key, value) VALUES ('test', %s, 'k', %s)",
                (list(path), f'{{"n": {n}}}'),
            )
        conn.execute("UPDATE pgmem.items SET value = '{\"n\": -1}', updated_at = now() + interval '1 s'")
    _alembic(dsn, "upgrade", "head")
    with psycopg.connect(dsn) as conn:
        keyed = conn.execute(
            "SELECT count(*) FILTER (WHERE path_key = pgmem.path_key(path)), count(*) FROM pgmem.items"
        ).fetchone()
        history = conn.execute(
            "SELECT count(*) FROM pgmem.item_history WHERE path_key = pgmem.path_key(path)"
        ).fetchone()
        pkey = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'items_pkey'"
        ).fetchone()
    assert keyed == (len(paths), len(paths)) and history == (len(paths),)
    assert pkey == ("PRIMARY KEY (namespace, path_key, key)",)
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1, migrate=False) as client:
        assert client.items.list_paths(prefix=("a",)) == [("a",), ("a", "b")]
        assert [client.items.get_many(p, ["k"])[0].value for p in paths] == [{"n": -1}] * len(paths)  # type: ignore[union-attr]
    _alembic(dsn, "downgrade", "0025")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT path FROM pgmem.items ORDER BY path").fetchall()
        pkey = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'items_pkey'"
        ).fetchone()
    assert [tuple(r[0]) for r in rows] == sorted(paths) and pkey == ("PRIMARY KEY (namespace, path, key)",)
    _alembic(dsn, "upgrade", "head")


_TSV_OPCLASS = """
SELECT o.opcname::text FROM pg_index AS i JOIN pg_opclass AS o ON o.oid = i.indclass[0]
WHERE i.indexrelid = 'pgmem.messages_tsv_idx'::regclass"""


def test_revision_0027_rebuilds_the_keyword_index_over_the_messages_there(dsn: str) -> None:
    """Messages written before 0027 are in the rebuilt index (its operator class serves pgmem.@@) and are
    found by keyword; the downgrade gives the index its default operator class back, the messages unchanged."""
    _alembic(dsn, "downgrade", "0026")
    with psycopg.connect(dsn) as conn:  # as the owner: the code of 0027 does not run on 0026
        conn.execute(
            "INSERT INTO pgmem.messages (namespace, id, content, content_hash)"
            " VALUES ('test', 'z', 'a zeppelin over the harbour', sha256('a zeppelin over the harbour'))"
        )
        conn.execute("INSERT INTO pgmem.memories (namespace, key) VALUES ('test', 'm') ON CONFLICT DO NOTHING")
        conn.execute(
            "INSERT INTO pgmem.memory_entries (namespace, memory, message_id, cause_by) VALUES ('test', 'm', 'z', '')"
        )
        assert conn.execute(_TSV_OPCLASS).fetchone() == ("tsvector_ops",)
    _alembic(dsn, "upgrade", "head")
    with psycopg.connect(dsn) as conn:
        assert conn.execute(_TSV_OPCLASS).fetchone() == ("tsvector_match_ops",)
    with pgmem.connect(dsn, namespace="test", min_size=0, max_size=1, migrate=False) as client:
        assert [m.id for m in client.messages.search_text("m", "zeppelin")] == ["z"]
    _alembic(dsn, "downgrade", "0026")
    with psycopg.connect(dsn) as conn:
        assert conn.execute(_TSV_OPCLASS).fetchone() == ("tsvector_ops",)
        assert conn.execute("SELECT to_regprocedure('pgmem.ts_match(tsvector,tsquery)')").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM pgmem.messages WHERE id = 'z'").fetchone() == (1,)
    _alembic(dsn, "upgrade", "head")


def test_connect_without_migrate_refuses_an_empty_database(empty_dsn: str) -> None:
    with pytest.raises(pgmem.SchemaOutOfDate):
        pgmem.connect(empty_dsn, migrate=False)
    assert _tables(empty_dsn) == set()


def _connect_worker(index: int, dsn: str, barrier: Any, results: Any) -> None:
    try:
        import pgmem as pgmem_in_child

        barrier.wait()
        with pgmem_in_child.connect(dsn, migrate=True, namespace=f"p{index}", min_size=0, max_size=1) as client:
            client.messages.add("team", pgmem_in_child.Message(content=f"process {index} is up"))
        results.put((index, None))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test with it
        results.put((index, traceback.format_exc()))


@pytest.mark.slow
def test_eight_processes_starting_at_once_on_an_empty_database_end_with_one_schema(empty_dsn: str) -> None:
    n = 8
    barrier = CTX.Barrier(n, timeout=120)
    results = CTX.Queue()
    procs = [CTX.Process(target=_connect_worker, args=(i, empty_dsn, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    reports: dict[int, str | None] = {}
    try:
        for _ in procs:
            try:
                index, error = results.get(timeout=120)
            except queue.Empty:
                pytest.fail(f"only {len(reports)} of {n} processes reported")
            reports[index] = error
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    errors = {i: e for i, e in reports.items() if e is not None}
    assert not errors, "\n".join(f"process {i}:\n{e}" for i, e in errors.items())
    assert [p.exitcode for p in procs] == [0] * n
    assert _versions(empty_dsn) == [migrate.head_revision()]
    assert schema_diff(empty_dsn) == []
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT namespace) FROM pgmem.messages").fetchone() == (
            n,
            n,
        )


def _pgmem_cli() -> list[str]:
    script = Path(sys.executable).with_name("pgmem")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pgmem.ops.cli"]


def test_cli_migrate_is_idempotent(empty_dsn: str, tmp_path: Path) -> None:
    head = migrate.head_revision()
    for _ in range(2):
        done = subprocess.run(
            [*_pgmem_cli(), "migrate", "--dsn", empty_dsn],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert f"schema at revision {head}" in done.stdout
    assert _versions(empty_dsn) == [head]
    assert schema_diff(empty_dsn) == []


def test_cli_migrate_reports_an_unreachable_server(tmp_path: Path) -> None:
    done = subprocess.run(
        [*_pgmem_cli(), "migrate", "--dsn", f"host={tmp_path} port=1 dbname=x user=x password=secret"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "ConnectionFailed" in done.stderr and "secret" not in done.stderr + done.stdout


def test_generated_sync_code_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, "tools/gen_sync.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
