"""A schema that proves it matches its revision (issue 34, item 4): ``pgmem migrate`` verifies the live
catalog against what the revision declares and names every difference, ``pgmem migrate --repair`` brings a
drifted schema to its revision keeping the data, ``pgmem doctor`` says it per category.

A stamp can lie: a database migrated while revision 0004 was an empty placeholder is stamped 0004 and
later migrations build on it, so it is at head without row-level security, policies or grants. These tests
make such databases (a real stamp that lies, and a migrated database taken apart by hand) and repair them.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from pgmem.ops import migrate
from pgmem.ops.doctor import run_checks
from pgmem.ops.drift import CATEGORIES
from pgmem.revision import SCHEMA_REVISION
from tests.conftest import needs_own_database
from tests.integration.test_cli import run_cli
from tests.migrations.test_migrations import _alembic, schema_diff


def _drift(dsn: str) -> set[str]:
    return {str(d) for d in migrate.verify(dsn).drift}


def _contents(dsn: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('pgmem.admin', 'on', false)")
        return conn.execute("SELECT namespace, id, content FROM pgmem.messages ORDER BY 1, 2").fetchall()  # type: ignore[return-value]


def _client_works(dsn: str, memory: str = "chat") -> None:
    """As pgmem_app (the client's SET ROLE): add, keyword and vector search, the trigger that queues new
    messages for embedding, and one namespace never sees another's rows."""
    with pgmem.connect(dsn, namespace="alpha", min_size=0, max_size=1, migrate=False) as client:
        client.vectors.enable(memory)
        client.vectors.flush()
        client.messages.add(memory, pgmem.Message(id="after", content="the walrus repaired the schema"))
        assert client.vectors.pending().get(client.embedder.model) == 1  # memory_entries_added queued it
        client.vectors.flush()
        assert [h.message.id for h in client.vectors.keyword_search("walrus", memory=memory)] == ["after"]
        assert client.search("walrus repaired the schema", memory=memory, k=1)[0].message.id == "after"
        assert "after" not in [m.id for m in client.with_namespace("beta").messages.last(memory)]
    with psycopg.connect(dsn) as conn:
        conn.execute("SET ROLE pgmem_app")
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (0,)  # no namespace: no row


def test_a_migrated_database_verifies_clean_and_migrate_twice_says_so(empty_dsn: str) -> None:
    for _ in range(2):
        done = run_cli("migrate", env={"PGMEM_DSN": empty_dsn})
        assert f"schema at revision {SCHEMA_REVISION}" in done.stdout
        assert f"schema matches revision {SCHEMA_REVISION}" in done.stdout, done.stdout
        assert "warn" not in done.stdout and "FAIL" not in done.stdout
    found = migrate.verify(empty_dsn)
    assert found.differences == () and found.notes == ()


def test_per_model_hnsw_indexes_built_at_run_time_are_not_drift(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="alpha", min_size=0, max_size=1) as client:
        client.vectors.enable("chat")
        client.messages.add("chat", pgmem.Message(content="a message with a vector"))
        client.vectors.flush()
        client.items.put(
            ("docs",), "a", {"text": "an item"}, texts=[("text", "an item with a vector")], embedder=client.embedder
        )
    with psycopg.connect(dsn) as conn:
        built = [r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%%_hnsw_m%%'")]
    assert any(name.startswith("embeddings_hnsw_m") for name in built), built
    assert migrate.verify(dsn).differences == ()
    assert migrate.upgrade(dsn) == SCHEMA_REVISION  # verifies, raises on drift
    assert "schema matches revision" in run_cli("migrate", env={"PGMEM_DSN": dsn}).stdout


def test_a_stamp_that_lies_is_named_and_repaired(empty_dsn: str) -> None:
    """The issue's database: revision 0004 (row-level security, the app role's grants, the views' rights)
    ran as an empty placeholder, the stamp says 0004, and every later migration built on it."""
    _alembic(empty_dsn, "upgrade", "0003")
    _alembic(empty_dsn, "stamp", "0004")
    with pytest.raises(pgmem.SchemaDrift) as raised:
        migrate.upgrade(empty_dsn)
    differences = set(raised.value.differences)
    assert isinstance(raised.value, pgmem.SchemaOutOfDate)
    for difference in (
        "row-level security: pgmem.messages: row-level security not enabled",
        "policies: pgmem.messages: policy pgmem_namespace missing",
        "policies: pgmem.messages: policy pgmem_admin missing",
        "grants: pgmem.messages: pgmem_app lacks DELETE, INSERT, SELECT, UPDATE",
        "grants: pgmem.embedding_models: pgmem_app lacks INSERT, SELECT",
        "grants: schema pgmem: pgmem_app lacks USAGE",
        "views: pgmem.queue_health: not security_invoker: it reads the tables with its owner's rights, not the "
        "caller's",
    ):
        assert difference in differences, difference
    assert "migrate --repair" in str(raised.value)

    failed = run_cli("migrate", env={"PGMEM_DSN": empty_dsn}, check=False)
    assert failed.returncode == 1, failed.stdout
    assert f"FAIL the schema differs from what revision {SCHEMA_REVISION} declares" in failed.stdout
    assert "    pgmem.memories: row-level security not enabled" in failed.stdout
    assert "-> run `pgmem migrate --repair`" in failed.stdout

    repaired = run_cli("migrate", "--repair", env={"PGMEM_DSN": empty_dsn})
    assert f"repaired {len(raised.value.differences)} differences" in repaired.stdout, repaired.stdout
    assert f"schema matches revision {SCHEMA_REVISION}" in repaired.stdout
    assert migrate.verify(empty_dsn).differences == ()
    assert schema_diff(empty_dsn) == []
    again = run_cli("migrate", "--repair", env={"PGMEM_DSN": empty_dsn})
    assert "nothing to repair" in again.stdout
    _client_works(empty_dsn)


def test_the_issue_s_literal_database_stamped_0007_migrates_then_is_repaired(empty_dsn: str) -> None:
    """Revisions 0004-0007 all ran as empty placeholders and the stamp says 0007 (issue 34's database):
    migrating to head must not fail on what they should have made (0015 dropped an index of 0005's), then
    names the differences, and the repair brings the schema to its revision."""
    _alembic(empty_dsn, "upgrade", "0003")
    _alembic(empty_dsn, "stamp", "0007")
    with pytest.raises(pgmem.SchemaDrift) as raised:
        migrate.upgrade(empty_dsn)
    assert "policies: pgmem.messages: policy pgmem_namespace missing" in set(raised.value.differences)
    repaired = run_cli("migrate", "--repair", env={"PGMEM_DSN": empty_dsn}, check=False)
    assert f"schema matches revision {SCHEMA_REVISION}" in repaired.stdout, repaired.stdout
    assert migrate.verify(empty_dsn).differences == ()
    _client_works(empty_dsn)


#: How the database is taken apart, and what verifying must then say (among the consequences it reports).
_BREAKS = {
    "DROP TABLE pgmem.retention_policies": "tables: pgmem.retention_policies: missing",
    "DROP TABLE pgmem.doorbell": "tables: pgmem.doorbell: missing",  # unlogged: created so again
    "ALTER TABLE pgmem.memories NO FORCE ROW LEVEL SECURITY": "row-level security: pgmem.memories: "
    "row-level security not forced",
    "ALTER TABLE pgmem.summaries DISABLE ROW LEVEL SECURITY": "row-level security: pgmem.summaries: "
    "row-level security not enabled",
    "DROP POLICY pgmem_admin ON pgmem.items": "policies: pgmem.items: policy pgmem_admin missing",
    "DROP POLICY pgmem_namespace ON pgmem.embeddings": "policies: pgmem.embeddings: policy pgmem_namespace missing",
    "ALTER POLICY pgmem_admin ON pgmem.vector_log TO PUBLIC": "policies: pgmem.vector_log: policy pgmem_admin is "
    "not migration 0004's: applies to pgmem_app (any client may then read every namespace)",
    "REVOKE DELETE ON pgmem.items FROM pgmem_app": "grants: pgmem.items: pgmem_app lacks DELETE",
    "REVOKE ALL ON pgmem.memory_entries FROM pgmem_app": "grants: pgmem.memory_entries: pgmem_app lacks DELETE, "
    "INSERT, SELECT, UPDATE",
    "GRANT DELETE ON pgmem.embedding_models TO pgmem_app": "grants: pgmem.embedding_models: pgmem_app may also "
    "DELETE "
    "(declared: INSERT, SELECT)",
    "GRANT TRUNCATE ON pgmem.messages TO pgmem_app": "grants: pgmem.messages: pgmem_app may also TRUNCATE "
    "(declared: DELETE, INSERT, SELECT, UPDATE)",
    "GRANT SELECT ON SEQUENCE pgmem.messages_seq_seq TO pgmem_app": "grants: pgmem.messages_seq_seq: pgmem_app "
    "may also SELECT (declared: USAGE)",
    "DROP INDEX pgmem.messages_cause_by_idx": "indexes: pgmem.messages_cause_by_idx: missing (on pgmem.messages)",
    # A column with a default, which views and an index depend on: they go with it.
    "ALTER TABLE pgmem.messages DROP COLUMN role CASCADE": "columns: pgmem.messages.role: missing "
    "(TEXT NOT NULL, default 'user')",
    "ALTER TABLE pgmem.memories ALTER COLUMN kind DROP DEFAULT": "columns: pgmem.memories.kind: default none, "
    "declared 'memory'",
    "ALTER TABLE pgmem.items DROP CONSTRAINT items_path_check": "constraints: items_path_check on pgmem.items: missing",
    "DROP TRIGGER memory_entries_added ON pgmem.memory_entries": "triggers: memory_entries_added on "
    "pgmem.memory_entries: missing",
    "ALTER TABLE pgmem.memories DISABLE TRIGGER memory_removed": "triggers: memory_removed on pgmem.memories: disabled",
    "DROP FUNCTION pgmem.fts_query(text)": "functions: pgmem.fts_query: missing",
    "CREATE OR REPLACE FUNCTION pgmem.notify_tag(p_ns text, p_name text) RETURNS text LANGUAGE sql AS "
    "$$ SELECT p_ns || '/' || p_name $$": "functions: pgmem.notify_tag(p_ns text, p_name text): differs from "
    "sql/triggers.sql: line ",
    # Messages stored meanwhile get no words (tsv): the repair stores them again.
    "CREATE OR REPLACE FUNCTION pgmem.fts_document(p_text text) RETURNS tsvector LANGUAGE plpgsql IMMUTABLE "
    "STRICT PARALLEL SAFE AS $$ BEGIN RETURN ''::tsvector; END $$": "functions: pgmem.fts_document(p_text text): "
    "differs from sql/text_search.sql: line ",
    "ALTER VIEW pgmem.queue_archive SET (security_invoker = false)": "views: pgmem.queue_archive: not "
    "security_invoker: it reads the tables with its owner's rights, not the caller's",
}


def _populate(dsn: str) -> None:
    with pgmem.connect(dsn, namespace="alpha", min_size=0, max_size=1) as client:
        client.vectors.enable("chat")
        client.messages.add_many("chat", [pgmem.Message(id=f"a{i}", content=f"alpha note {i}") for i in range(5)])
        client.vectors.flush()
        client.items.put(("docs",), "a", {"text": "an item"})
        beta = client.with_namespace("beta")
        beta.messages.add_many("chat", [pgmem.Message(id=f"b{i}", content=f"beta note {i}") for i in range(3)])
        beta.queues.push("jobs", pgmem.Message(content="a job"))


def test_each_difference_is_named_then_repaired_keeping_the_data(dsn: str, single_database: bool) -> None:
    needs_own_database(single_database)  # it takes the schema apart
    _populate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _BREAKS:
            conn.execute(statement)  # type: ignore[call-overload]
        conn.execute(
            "INSERT INTO pgmem.messages (namespace, id, content, content_hash)"
            " VALUES ('alpha', 'z', 'a zebra meanwhile', sha256('a zebra meanwhile'))"
        )
    before = _contents(dsn)
    found = _drift(dsn)
    missing = [expected for expected in _BREAKS.values() if not any(f.startswith(expected) for f in found)]
    assert not missing, (missing, sorted(found))
    # The views the dropped column took with it are named too (and built again below).
    assert (
        "views: pgmem.role_activity: missing; its declaration in sql/views.sql fails here: column m.role does "
        "not exist" in found
    )

    result = run_cli("migrate", env={"PGMEM_DSN": dsn}, check=False)
    assert result.returncode == 1
    for category in (
        "tables",
        "columns",
        "indexes",
        "constraints",
        "functions",
        "triggers",
        "views",
        "row-level security",
        "policies",
        "grants",
    ):
        assert f"\n  {category} (" in result.stdout, (category, result.stdout)
    checks = {c.name: c for c in run_checks(dsn, embedder=False)}
    unbroken = ("metadata filters", "keyword search")
    assert [c for c in CATEGORIES if checks[c].status == "fail"] == [c for c in CATEGORIES if c not in unbroken]
    assert "pgmem.memories: row-level security not forced" in checks["row-level security"].found
    assert "migrate --repair" in checks["grants"].advice

    repaired = run_cli("migrate", "--repair", "--dsn", dsn)
    assert f"repaired {len(found)} differences" in repaired.stdout, repaired.stdout
    assert f"schema matches revision {SCHEMA_REVISION}" in repaired.stdout
    assert f"note: pgmem.messages.tsv recomputed for {len(before)} messages" in repaired.stdout
    assert migrate.verify(dsn).differences == ()
    assert schema_diff(dsn) == []
    assert _contents(dsn) == before  # every message kept (their role column is back, with its default)
    assert all(c.status == "ok" for c in run_checks(dsn, embedder=False) if c.name in CATEGORIES)
    assert migrate.repair(dsn).fixed == ()  # idempotent
    _client_works(dsn)
    with pgmem.connect(dsn, namespace="alpha", min_size=0, max_size=1, migrate=False) as client:
        assert [h.message.id for h in client.vectors.keyword_search("zebra")] == ["z"]


def test_what_is_not_pgmems_is_reported_not_dropped(dsn: str, single_database: bool) -> None:
    needs_own_database(single_database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pgmem.mine (x int)")
        conn.execute("ALTER TABLE pgmem.messages ADD COLUMN mine text")
        conn.execute("CREATE INDEX items_mine_idx ON pgmem.items (key)")
        conn.execute("CREATE POLICY narrower ON pgmem.items AS RESTRICTIVE USING (key <> 'secret')")
    found = migrate.verify(dsn)
    assert found.drift == ()
    assert {str(d) for d in found.warnings} == {
        "tables: pgmem.mine: not declared by pgmem (left as it is)",
        "columns: pgmem.messages.mine: not declared by pgmem (left as it is)",
        "indexes: pgmem.items_mine_idx (on pgmem.items): not declared by pgmem (left as it is)",
        "policies: pgmem.items: policy narrower is not pgmem's (restrictive: left)",
    }
    assert migrate.upgrade(dsn) == SCHEMA_REVISION  # warnings do not fail it
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE POLICY everyone ON pgmem.memories USING (true)")  # permissive: every row to all
    with pytest.raises(pgmem.SchemaDrift, match="policy everyone is not pgmem's, and permissive"):
        migrate.upgrade(dsn)
    result = run_cli("migrate", "--repair", "--dsn", dsn, check=False)
    assert result.returncode == 1 and "pgmem does not repair some" in result.stdout, result.stdout
    with psycopg.connect(dsn) as conn:
        kept = conn.execute(
            "SELECT to_regclass('pgmem.mine') IS NOT NULL, to_regclass('pgmem.items_mine_idx') IS NOT NULL,"
            " (SELECT count(*) FROM pg_policy WHERE polname IN ('everyone', 'narrower'))"
        ).fetchone()
    assert kept == (True, True, 2)


def test_verifying_takes_any_role_repairing_the_owner(dsn: str, single_database: bool) -> None:
    needs_own_database(single_database)
    role = f"pgmem_t_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE pgmem_app").format(sql.Identifier(role)))
        conn.execute("REVOKE DELETE ON pgmem.items FROM pgmem_app")
    params = conninfo_to_dict(dsn)
    params["options"] = f"{params.get('options') or ''} -c role={role}".strip()
    as_app = make_conninfo(**params)
    try:
        found = migrate.verify(as_app)  # an agent's role: everything but the code's definitions
        assert [str(d) for d in found.drift] == ["grants: pgmem.items: pgmem_app lacks DELETE"]
        assert found.notes and "not compared" in found.notes[0]
        with pytest.raises(pgmem.PermissionDenied, match="repairing the schema takes its owner"):
            migrate.repair(as_app)
        result = run_cli("migrate", "--repair", "--dsn", as_app, check=False)
        assert result.returncode == 1 and "PermissionDenied" in result.stderr
        assert _drift(dsn) == {"grants: pgmem.items: pgmem_app lacks DELETE"}
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _as_a_lesser_role_migrates(conn: psycopg.Connection[Any]) -> None:
    """Migrations 0016 and 0027 as a role that is not a superuser leaves them (from a superuser's)."""
    for statement in (
        "DROP INDEX pgmem.messages_metadata_idx",
        "DROP INDEX pgmem.items_value_idx",
        "CREATE INDEX items_value_idx ON pgmem.items USING gin (value jsonb_path_ops)",
        "DROP OPERATOR FAMILY pgmem.jsonb_contains_ops USING gin",
        "CREATE OR REPLACE FUNCTION pgmem.jsonb_contains(jsonb, jsonb) RETURNS boolean"
        " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @> $2'",
        "DROP INDEX pgmem.messages_tsv_idx",
        "CREATE INDEX messages_tsv_idx ON pgmem.messages USING gin (tsv)",
        "DROP OPERATOR FAMILY pgmem.tsvector_match_ops USING gin",
        "CREATE OR REPLACE FUNCTION pgmem.ts_match(tsvector, tsquery) RETURNS boolean"
        " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1 @@ $2'",
    ):
        conn.execute(statement)  # type: ignore[call-overload]


def test_leakproof_operators_without_a_superuser_are_a_warning_until_one_migrates(
    dsn: str, single_database: bool
) -> None:
    """What migrations 0016 and 0027 leave where a role that is not a superuser migrated: containment and the
    keyword match as plain SQL functions, no operator classes, the indexes in the fallback classes or none.
    Not drift; a superuser's `pgmem migrate` builds them. A missing fallback index is drift, repaired."""
    needs_own_database(single_database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _as_a_lesser_role_migrates(conn)
        conn.execute("DROP INDEX pgmem.messages_tsv_idx")
    found = migrate.verify(dsn)
    assert [(d.category, d.subject) for d in found.drift] == [("keyword search", "pgmem.messages_tsv_idx")]
    repaired = migrate.repair(dsn)  # as a superuser: the fallback index, then the leakproof one over it
    assert [(d.category, d.subject) for d in repaired.before.drift] == [("keyword search", "pgmem.messages_tsv_idx")]
    assert repaired.after.differences == ()
    with psycopg.connect(dsn, autocommit=True) as conn:
        _as_a_lesser_role_migrates(conn)
    found = migrate.verify(dsn)
    assert found.drift == ()
    assert [(d.category, d.severity) for d in found.warnings] == [
        ("metadata filters", "warning"),
        ("keyword search", "warning"),
    ]
    assert all("run `pgmem migrate` once as a superuser" in w.detail for w in found.warnings)
    assert "pgmem.messages_tsv_idx uses tsvector_ops" in found.warnings[1].detail
    checks = {c.name: c for c in run_checks(dsn, embedder=False)}
    assert checks["metadata filters"].status == checks["keyword search"].status == "warn"
    assert migrate.upgrade(dsn) == SCHEMA_REVISION  # as a superuser: pgmem.ops.leakproof.build
    assert migrate.verify(dsn).differences == ()
