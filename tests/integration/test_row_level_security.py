"""Row-level security (migration 0004): tenants kept apart by PostgreSQL, below any WHERE clause.

The test DSNs log in as a superuser, so every test client of the suite acts as ``pgmem_app`` (SET ROLE in
the pool's configure hook) under the policies: the whole suite passing is the proof that they break
nothing. These tests check the boundary itself, with raw SQL as an attacker on a connection would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from pgmem import security
from pgmem.errors import InvalidInput, PermissionDenied
from pgmem.models import Message

#: Every table of schema pgmem with a namespace column.
_NAMESPACED = """
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
       array(SELECT p.polname FROM pg_policy AS p WHERE p.polrelid = c.oid ORDER BY 1)
FROM pg_class AS c
WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
  AND EXISTS (SELECT 1 FROM pg_attribute AS a
              WHERE a.attrelid = c.oid AND a.attname = 'namespace' AND NOT a.attisdropped)
ORDER BY 1"""


def _tables(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute(_NAMESPACED)]


@pytest.fixture
def app_conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A raw connection acting as pgmem_app, as a client's pooled connections do."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgmem_app")
        yield conn


def _fill(dsn: str, namespace: str) -> None:
    """Rows of ``namespace`` in most tables, through the library."""
    with pgmem.connect(dsn, namespace=namespace, max_size=2) as client:
        client.vectors.enable("notes")
        client.messages.add("notes", Message(content=f"secret of {namespace}", cause_by="Write"))
        client.vectors.flush()
        client.queues.push("jobs", Message(content=f"job of {namespace}"))
        item = client.queues.claim("jobs")[0]
        client.queues.ack(item)
        client.queues.push("jobs", Message(content=f"job 2 of {namespace}"))
        client.items.put(("docs",), "k", {"text": f"item of {namespace}"})
        client.brains.dump("brain", history=[Message(content=f"history of {namespace}")])
        client.stores.register("store", "simple", {})
        client.search("secret", memory="notes", k=3)


def test_every_table_keyed_by_namespace_forces_row_level_security(dsn: str) -> None:
    """A lint of the schema: a table with a namespace column and without forced row-level security (or
    without the two policies) fails here, whichever migration added it."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(_NAMESPACED).fetchall()
        assert len(rows) >= 17
        missing = [r[0] for r in rows if not (r[1] and r[2] and set(r[3]) >= {"pgmem_namespace", "pgmem_admin"})]
        assert missing == []
        # The shared registry has no namespace and no policy; it is only readable and insertable.
        privileges = conn.execute(
            "SELECT has_table_privilege('pgmem_app', 'pgmem.embedding_models', p) FROM unnest(%s::text[]) AS p",
            (["SELECT", "INSERT", "UPDATE", "DELETE"],),
        ).fetchall()
        assert [p[0] for p in privileges] == [True, True, False, False]
        role = conn.execute(
            "SELECT rolsuper, rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = 'pgmem_app'"
        ).fetchone()
        assert role == (False, False, False)
        owners = conn.execute(
            "SELECT count(*) FROM pg_class "
            "WHERE relnamespace = 'pgmem'::regnamespace AND relowner = 'pgmem_app'::regrole"
        ).fetchone()
        assert owners == (0,)


def test_views_run_with_the_callers_rights(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    _fill(dsn, "tenant-a")
    _fill(dsn, "tenant-b")
    with psycopg.connect(dsn) as conn:
        views = conn.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace AND relkind = 'v'"
        ).fetchall()
        assert len(views) >= 10
        assert all("security_invoker=true" in (options or []) for _, options in views), views
        # The superuser sees both tenants through the views.
        assert conn.execute("SELECT count(DISTINCT namespace) FROM pgmem.conversation_facts").fetchone() == (2,)
    for name, _ in views:
        view = sql.Identifier("pgmem", name)
        with app_conn.transaction():
            rows = app_conn.execute(sql.SQL("SELECT DISTINCT namespace FROM {}").format(view)).fetchall()
        assert rows == [], name  # nothing without a namespace
        with app_conn.transaction():
            app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', true)")
            seen = {r[0] for r in app_conn.execute(sql.SQL("SELECT DISTINCT namespace FROM {}").format(view))}
        assert seen <= {"tenant-a"}, name
    with app_conn.transaction():
        app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', true)")
        assert app_conn.execute("SELECT count(*) FROM pgmem.conversation_facts").fetchone()[0] > 0  # type: ignore[index]


def test_app_role_sees_nothing_without_a_namespace_and_one_namespace_with_it(
    dsn: str, app_conn: psycopg.Connection[Any]
) -> None:
    _fill(dsn, "tenant-a")
    _fill(dsn, "tenant-b")
    with psycopg.connect(dsn) as conn:
        tables = _tables(conn)
        counts = {
            t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("pgmem", t))).fetchone()[0]  # type: ignore[index]
            for t in tables
        }
    filled = [t for t, n in counts.items() if n > 0]
    assert {"messages", "memory_entries", "queue_items", "embeddings", "items", "brain_memories"} <= set(filled)
    for table in tables:
        name = sql.Identifier("pgmem", table)
        assert app_conn.execute(sql.SQL("SELECT count(*) FROM {}").format(name)).fetchone() == (0,), table
        # An empty setting is no namespace either.
        with app_conn.transaction():
            app_conn.execute("SELECT set_config('pgmem.namespace', '', true)")
            assert app_conn.execute(sql.SQL("SELECT count(*) FROM {}").format(name)).fetchone() == (0,), table
        with app_conn.transaction():
            app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', true)")
            seen = app_conn.execute(sql.SQL("SELECT DISTINCT namespace FROM {}").format(name)).fetchall()
        assert seen == ([("tenant-a",)] if table in filled else []), table
    # The setting is local to its transaction: the next statement sees nothing again.
    assert app_conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (0,)
    # Asking for the other tenant's rows by name changes nothing.
    with app_conn.transaction():
        app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', true)")
        assert app_conn.execute("SELECT count(*) FROM pgmem.messages WHERE namespace = 'tenant-b'").fetchone() == (0,)


def test_app_role_cannot_write_another_namespace(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    _fill(dsn, "tenant-b")
    with app_conn.transaction():
        app_conn.execute("SELECT set_config('pgmem.namespace', 'tenant-a', true)")
        with pytest.raises(pg_errors.InsufficientPrivilege, match="row-level security"), app_conn.transaction():
            app_conn.execute(
                "INSERT INTO pgmem.messages (namespace, id, content, content_hash) VALUES ('tenant-b', 'x', 'x', 'x')"
            )
        with pytest.raises(pg_errors.InsufficientPrivilege, match="row-level security"), app_conn.transaction():
            app_conn.execute("INSERT INTO pgmem.memories (namespace, key) VALUES ('tenant-b', 'stolen')")
        # Moving an own row to another namespace is refused too (WITH CHECK on the new row).
        app_conn.execute("INSERT INTO pgmem.memories (namespace, key) VALUES ('tenant-a', 'mine')")
        with pytest.raises(pg_errors.InsufficientPrivilege, match="row-level security"), app_conn.transaction():
            app_conn.execute("UPDATE pgmem.memories SET namespace = 'tenant-b' WHERE key = 'mine'")
        # The other tenant's rows are out of reach of updates and deletes (none matched).
        assert app_conn.execute("DELETE FROM pgmem.messages WHERE namespace = 'tenant-b'").rowcount == 0
        assert app_conn.execute("UPDATE pgmem.brain_memories SET version = version + 1").rowcount == 0
        # The admin setting gives the application role nothing: its policy is the owner's.
        app_conn.execute("SELECT set_config('pgmem.admin', 'on', true)")
        assert app_conn.execute("SELECT count(*) FROM pgmem.messages WHERE namespace = 'tenant-b'").fetchone() == (0,)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE pgmem.{} DISABLE ROW LEVEL SECURITY",
        "ALTER TABLE pgmem.{} NO FORCE ROW LEVEL SECURITY",
        "DROP POLICY pgmem_namespace ON pgmem.{}",
        "CREATE POLICY everything ON pgmem.{} USING (true)",
        "ALTER TABLE pgmem.{} OWNER TO pgmem_app",
        "TRUNCATE pgmem.{}",
    ],
)
def test_app_role_cannot_lift_row_level_security(dsn: str, app_conn: psycopg.Connection[Any], statement: str) -> None:
    for table in _tables(app_conn):
        with pytest.raises(pg_errors.InsufficientPrivilege):
            app_conn.execute(statement.format(table))
    with pytest.raises(pg_errors.InsufficientPrivilege):
        app_conn.execute("ALTER ROLE pgmem_app BYPASSRLS")
    # row_security = off makes a query that RLS would filter fail instead: it never shows more.
    app_conn.execute("SET row_security = off")
    with pytest.raises(pg_errors.InsufficientPrivilege):
        app_conn.execute("SELECT count(*) FROM pgmem.messages")


def test_client_acts_as_the_app_role(client: pgmem.Client, dsn: str) -> None:
    """A superuser DSN (the tests'): the pool's connections act as pgmem_app; the DSN stays the client's
    for the owner's work."""
    with client.connection() as conn:
        row = conn.execute(
            "SELECT current_user, session_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        ).fetchone()
    assert row is not None and row[0] == "pgmem_app" and row[2] is False
    assert client.sessions.role == "pgmem_app"
    assert client.sessions.owner_conninfo == client.conninfo
    # A statement outside pgmem's calls sees the client's namespace on client.connection(), and nothing
    # on the same connection without one.
    client.messages.add("notes", Message(content="hello"))
    with client.connection() as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (1,)
        conn.execute("SELECT set_config('pgmem.namespace', '', false)")
        assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (0,)
    assert client.messages.count("notes") == 1


def test_a_dsn_that_bypasses_rls_needs_the_app_role(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_APP_ROLE", "pgmem_no_such_role")
    with pytest.raises(PermissionDenied, match="pgmem_no_such_role"):
        pgmem.connect(dsn, namespace="x")


def _login(dsn: str, user: str, password: str | None = None) -> str:
    params = conninfo_to_dict(dsn)
    params["user"] = user
    params.pop("password", None)
    if password is not None:
        params["password"] = password
    return make_conninfo("", **params)


def test_create_app_role_and_connect_as_it(dsn: str) -> None:
    name = f"agent_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert security.create_app_role(conn, name, password="pw with spaces 'and quotes'") is True
        assert security.create_app_role(conn, name) is False  # idempotent
        assert conn.execute(
            "SELECT rolcanlogin, rolsuper, rolbypassrls, pg_has_role(%s, 'pgmem_app', 'MEMBER') FROM pg_roles "
            "WHERE rolname = %s",
            (name, name),
        ).fetchone() == (True, False, False, True)
    _fill(dsn, "tenant-b")
    try:
        agent = _login(dsn, name, "pw with spaces 'and quotes'")
        with pgmem.connect(agent, namespace="tenant-a", max_size=2) as client:
            assert client.sessions.role is None  # held by row-level security as it is: no SET ROLE
            with client.connection() as conn:
                assert conn.execute("SELECT current_user, session_user").fetchone() == (name, name)
            client.messages.add("notes", Message(content="mine"))
            assert [m.content for m in client.messages.last("notes", 10)] == ["mine"]
            assert client.with_namespace("tenant-b").messages.count("notes") == 1  # its own namespace's view
        with psycopg.connect(agent, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pgmem.messages").fetchone() == (0,)
            with pytest.raises(pg_errors.InsufficientPrivilege):
                conn.execute("ALTER TABLE pgmem.messages DISABLE ROW LEVEL SECURITY")
            with pytest.raises(PermissionDenied), security.admin_transaction(conn):
                pass
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.mark.parametrize("name", ["", "Agent", "pg_agent", "1agent", "a-b", "x" * 64, "pgmem_app", 7])
def test_create_app_role_refuses_bad_names(dsn: str, name: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute("SELECT count(*) FROM pg_roles").fetchone()
        with pytest.raises(InvalidInput):
            security.create_app_role(conn, name)
        # A superuser is no application role.
        superuser = conn.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
        with pytest.raises(InvalidInput, match="bypasses"):
            security.create_app_role(conn, superuser)
        assert conn.execute("SELECT count(*) FROM pg_roles").fetchone() == before


def test_cli_roles_create(dsn: str) -> None:
    name = f"cli_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PGMEM_TEST_ROLE_PW": "s3cret-pw"}
    try:
        for expected in ("created", "already existed"):
            result = subprocess.run(
                [sys.executable, "-m", "pgmem.ops.cli", "roles", "create", "--name", name, "--password-env",
                 "PGMEM_TEST_ROLE_PW", "--dsn", dsn],
                capture_output=True, text=True, env=env, timeout=120,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert expected in result.stdout and "s3cret-pw" not in result.stdout + result.stderr
        bad = subprocess.run(
            [sys.executable, "-m", "pgmem.ops.cli", "roles", "create", "--name", "Bad-Name", "--dsn", dsn],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert bad.returncode == 1 and "InvalidInput" in bad.stderr
        with psycopg.connect(_login(dsn, name, "s3cret-pw")) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (name,)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_admin_transaction_for_the_owner_only(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    _fill(dsn, "tenant-a")
    _fill(dsn, "tenant-b")
    with psycopg.connect(dsn, autocommit=True) as conn:
        with security.admin_transaction(conn):
            assert conn.execute("SELECT current_setting('pgmem.admin')").fetchone() == ("on",)
            assert conn.execute("SELECT count(DISTINCT namespace) FROM pgmem.messages").fetchone() == (2,)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # Inside the caller's transaction: a savepoint, and the setting off again after it.
        with conn.transaction():
            with security.admin_transaction(conn):
                pass
            assert conn.execute("SELECT current_setting('pgmem.admin', true)").fetchone() == ("",)
    with pytest.raises(PermissionDenied, match="pgmem_app"), security.admin_transaction(app_conn):
        pass
    with pytest.raises(InvalidInput):
        security.admin_transaction("not a connection")  # type: ignore[call-overload]


async def test_admin_transaction_async(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        async with security.admin_transaction(conn):
            cur = await conn.execute("SELECT current_setting('pgmem.admin')")
            assert await cur.fetchone() == ("on",)
        await conn.execute("SET ROLE pgmem_app")
        with pytest.raises(PermissionDenied):
            async with security.admin_transaction(conn):
                pass


def test_admin_policy_belongs_to_the_migrating_role(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        roles = conn.execute(
            "SELECT DISTINCT p.polroles FROM pg_policy AS p JOIN pg_class AS c ON c.oid = p.polrelid "
            "WHERE c.relnamespace = 'pgmem'::regnamespace AND p.polname = 'pgmem_admin'"
        ).fetchall()
        owner = conn.execute("SELECT relowner FROM pg_class WHERE oid = 'pgmem.messages'::regclass").fetchone()
    assert owner is not None and roles == [([owner[0]],)]


def test_embedded_default_logs_in_as_a_non_superuser(tmp_path: Path) -> None:
    """No DSN: migrations as the embedded server's superuser, every pooled connection as pgmem_agent."""
    home = tmp_path / "home"
    code = (
        "import pgmem\n"
        "with pgmem.connect(namespace='emb', max_size=2) as c:\n"
        "    c.messages.add('m', pgmem.Message(content='hi'))\n"
        "    with c.connection() as conn:\n"
        '        print(conn.execute("SELECT current_user, session_user, (SELECT rolsuper OR rolbypassrls FROM pg_roles'
        " WHERE rolname = session_user) FROM pg_class WHERE oid = 'pgmem.messages'::regclass\").fetchone())\n"
        "    print(c.messages.count('m'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PGMEM_DSN"}
    env["PGMEM_HOME"] = str(home)
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.strip().splitlines()
        assert lines == ["('pgmem_agent', 'pgmem_agent', False)", "1"]
    finally:
        from pgmem.ops import server

        server.stop(home)


def test_index_left_to_the_owner_when_the_client_has_none(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """An app-role login with no owner DSN registers a model without its HNSW index (a warning), searches
    stay exact and correct, and `pgmem migrate` builds the index."""
    from pgmem.embeddings import HashingEmbedder
    from pgmem.ops import migrate

    name = f"agent_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        security.create_app_role(conn, name, password="pw")
    try:
        embedder = HashingEmbedder(dimension=24)
        with pgmem.connect(_login(dsn, name, "pw"), namespace="t", embedder=embedder) as client:
            assert client.sessions.owner_conninfo is None
            client.vectors.enable("notes")
            client.messages.add_many("notes", [Message(content=f"note number {i}") for i in range(20)])
            client.vectors.flush()
            hits = client.search("note number 7", memory="notes", k=3)
            assert hits and hits[0].message.content == "note number 7"
        assert "pgmem migrate" in caplog.text
        with psycopg.connect(dsn) as conn:
            missing = conn.execute(
                "SELECT m.id FROM pgmem.embedding_models m WHERE to_regclass('pgmem.embeddings_hnsw_m' || m.id) IS NULL"
            ).fetchall()
        assert missing, "the app role must not have built an index"
        built = migrate.build_model_indexes(dsn)
        assert {f"embeddings_hnsw_m{r[0]}" for r in missing} <= set(built)
        assert migrate.build_model_indexes(dsn) == []
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_model_lock_key_is_the_clients(dsn: str) -> None:
    from pgmem._async.embedding_models import MODEL_LOCK_KEY
    from pgmem.ops import migrate

    assert migrate.MODEL_LOCK_KEY == MODEL_LOCK_KEY


def test_app_role_draws_from_sequences_but_cannot_read_them(dsn: str, app_conn: psycopg.Connection[Any]) -> None:
    """A sequence's last_value tells every tenant how much the others wrote (migration 0013): the app role
    may draw values (nextval, as an idempotent push does), not read them."""
    sequences = [
        row[0]
        for row in app_conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class AS c"
            " WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'S' ORDER BY 1"
        )
    ]
    assert "pgmem.messages_seq_seq" in sequences
    for name in sequences:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app_conn.execute(f"SELECT last_value FROM {name}")  # noqa: S608 - a catalog name
        assert app_conn.execute("SELECT has_sequence_privilege(%s, 'USAGE')", (name,)).fetchone() == (True,)
    with pgmem.connect(dsn, namespace="tenant-a", max_size=1) as client:  # acts as pgmem_app
        first = client.queues.push("jobs", Message(content="once"), idempotency_key="k-1")
        again = client.queues.push("jobs", Message(content="once"), idempotency_key="k-1")
    assert first.id is not None and again.id == first.id
