"""A tables' owner that is not a superuser (a managed service's) migrates a fresh database and uses it.

pgvector is not a trusted extension, so a superuser creates it (as a managed service's console does);
everything else is the owner's: ``pgmem migrate``, the schema check, a client's reads and writes, and the
doorbell's reader, whose function used to set ``pgmem.admin`` with a ``SET`` clause that only a superuser
may declare on PostgreSQL 15+ (migration 0021).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from pgmem import Message
from pgmem.ops import migrate
from pgmem.revision import SCHEMA_REVISION
from tests.conftest import needs_own_database


@pytest.fixture
def owner_dsn(admin_dsn: str, single_database: bool) -> Iterator[str]:
    """A fresh database owned by a LOGIN role that is not a superuser, with pgvector created for it."""
    needs_own_database(single_database)
    role, password, dbname = f"owner_{uuid.uuid4().hex[:10]}", uuid.uuid4().hex, f"pgmem_owned_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:  # type: ignore[index]
            pytest.skip("needs a superuser to create the owner and the extension")
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEROLE NOSUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(dbname), sql.Identifier(role)))
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = dbname
    with psycopg.connect(make_conninfo(**params), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    params.update(user=role, password=password)
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _grant_app_role(admin_dsn: str, owner_dsn: str) -> None:
    owner = conninfo_to_dict(owner_dsn)["user"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT pgmem_app TO {}").format(sql.Identifier(str(owner))))


def test_an_owner_that_is_not_a_superuser_migrates_and_uses_a_fresh_database(admin_dsn: str, owner_dsn: str) -> None:
    assert migrate.upgrade(owner_dsn) == SCHEMA_REVISION
    # pgmem_app is the server's (roles are cluster-wide) and another owner made it on this one, so this owner
    # is not a member: what a DBA does then (the client's PermissionDenied says so). On a server of its own
    # the owner's migration creates the role and joins it.
    _grant_app_role(admin_dsn, owner_dsn)
    found = migrate.verify(owner_dsn)
    assert found.drift == ()
    # What only a superuser may build (the indexes of 0016's metadata filters and 0027's keyword search) is
    # a warning, nothing else.
    assert [w.category for w in found.warnings] == ["metadata filters", "keyword search"]
    with pgmem.connect(owner_dsn, namespace="team") as client:
        assert client.messages.add("m", Message(content="hello", cause_by="Talk", metadata={"k": 1}))
        assert [m.content for m in client.messages.last("m", 5)] == ["hello"]
        # the operators over SQL functions: the same answers, without the index
        assert [m.content for m in client.messages.search_text("m", "hello")] == ["hello"]
        assert [h.message.content for h in client.vectors.keyword_search("hello", metadata={"k": 1})] == ["hello"]
        client.queues.push("q", Message(content="job"))
        [item] = client.queues.claim("q")
        assert item.message.content == "job"
        client.queues.ack(item)
        assert client.queues.claim("q") == []
    # A superuser's next migration declares the functions leakproof and builds the indexes they serve.
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = conninfo_to_dict(owner_dsn)["dbname"]
    assert migrate.upgrade(make_conninfo(**params)) == SCHEMA_REVISION
    assert migrate.verify(owner_dsn).warnings == ()
    with pgmem.connect(owner_dsn, namespace="team") as client:
        assert [m.content for m in client.messages.search_text("m", "hello")] == ["hello"]


def test_the_doorbell_reader_puts_pgmem_admin_back(owner_dsn: str) -> None:
    """ring_doorbell turns pgmem.admin on for its own statements only: its caller's value is back after it."""
    migrate.upgrade(owner_dsn)
    with psycopg.connect(owner_dsn) as conn:
        assert conn.execute("SELECT pgmem.ring_doorbell(0, false)").fetchone() == (0,)
        assert conn.execute("SELECT coalesce(current_setting('pgmem.admin', true), '')").fetchone() == ("",)
        conn.execute("SET LOCAL pgmem.admin = 'off'")
        conn.execute("SELECT pgmem.ring_doorbell(0, false)")
        assert conn.execute("SELECT current_setting('pgmem.admin')").fetchone() == ("off",)
