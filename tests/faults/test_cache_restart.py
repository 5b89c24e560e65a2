"""The FAISS cache across a server restart that changed a memory's vectors without moving its revision.

A background embedder commits asynchronously (issue 38: the memory's revision is not held through a WAL
flush): a crash can lose a commit whose vectors a cache had read, and the restarted server then gives the
lost commit's revision to other vectors. A cache must not take the revision for the same state: it
reloads what it read from another server incarnation (pgmem.cache.reader). The lost commit itself cannot
be made to happen on demand (the WAL writer flushes it within milliseconds), so the test makes its
outcome by hand on a really restarted server: with the owner's triggers off, one message's vector is
replaced by another's, and the memory's revision stays what the cache read. Without the check, both modes
answered with the vector the server no longer holds.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgmem
from pgmem import Message
from pgmem.cache import VectorCache
from tests.faults.conftest import PrivateServer

pytestmark = pytest.mark.slow


def _swap_behind_the_caches_back(dsn: str, namespace: str, gone: str, came: str) -> None:
    """Give ``came`` the vector of ``gone`` in place of its own, logging nothing: the memory's revision
    stays as it was."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # no trigger: no log, no revision
        conn.execute("DELETE FROM pgmem.embeddings WHERE namespace = %s AND message_id = %s", (namespace, came))
        conn.execute(
            "UPDATE pgmem.embeddings SET message_id = %s WHERE namespace = %s AND message_id = %s",
            (came, namespace, gone),
        )


def _top(cache: VectorCache, vector: Any) -> str:
    return str(cache.search_vectors("m", vector[None, :], k=1)[0][0][0])


def _restart(server: PrivateServer) -> None:
    server.kill()
    server.backends_gone()
    server.start()


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_a_cache_reloads_what_it_read_before_the_server_restarted(
    private_server: PrivateServer, namespace: str, mode: str
) -> None:
    dsn = private_server.dsn
    with pgmem.connect(dsn, namespace=namespace, timeout=10) as client:
        client.vectors.enable("m")
        client.messages.add_many(
            "m", [Message(id="kept", content="a note that stays"), Message(id="lost", content="a lunch order")]
        )
        client.messages.add("m", Message(id="late", content="a message whose vector the crash had"))
        client.vectors.wait()
        with VectorCache(client, mode=mode) as cache:  # type: ignore[arg-type]  # a parametrized Literal
            vector = client.vectors.registry.embedder(None).embed(["a lunch order"])[0]
            assert _top(cache, vector) == "lost"
            with psycopg.connect(dsn) as conn:
                before = conn.execute(
                    "SELECT vec_rev FROM pgmem.memories WHERE namespace = %s AND key = 'm'", (namespace,)
                ).fetchone()
            _restart(private_server)
            # The restarted server holds "late" where "lost" was, at the revision the cache read.
            _swap_behind_the_caches_back(make_conninfo(dsn), namespace, "lost", "late")
            with psycopg.connect(dsn) as conn:
                after = conn.execute(
                    "SELECT vec_rev FROM pgmem.memories WHERE namespace = %s AND key = 'm'", (namespace,)
                ).fetchone()
            assert after == before
            give_up = time.monotonic() + 30
            while True:  # the cache's connections come back by themselves
                try:
                    top = _top(cache, vector)
                    break
                except pgmem.PgmemError:
                    assert time.monotonic() < give_up
                    time.sleep(0.1)
            assert top == "late"
