"""A statement sent with its block's COMMIT (``executor.transaction(commit_pipelined=True)``,
``block.send_with_commit``; issue 38): the statement and the COMMIT leave the client in one write, so
the lock it takes is held from the statement through the commit and never across a round trip to the
client; the block stays all or nothing."""

from __future__ import annotations

import re
import socket
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
import pgmem._sync.outbox
from pgmem.embeddings import HashingEmbedder, Precomputed
from pgmem.errors import PgmemError
from tests.faults.proxy import Proxy

FACT = "Alice's favourite colour is blue"
#: Each one's cosine similarity with another (the offline embedder) is about 0.93.
VARIANTS = [f"{FACT}, noted by agent {i}" for i in range(3)]
LOCK_MEMORY = "SELECT key FROM pgmem.memories WHERE namespace = %(ns)s AND key = 'm' FOR NO KEY UPDATE"


def _lockable(dsn: str) -> bool:
    """Whether another session can lock the memory's row at once (what a second embedder does)."""
    with psycopg.connect(dsn) as other:
        try:
            other.execute("SELECT 1 FROM pgmem.memories WHERE key = 'm' FOR NO KEY UPDATE NOWAIT")
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            other.rollback()
    return True


def test_the_last_statement_goes_with_the_commit(client: pgmem.Client, dsn: str) -> None:
    """The block reads (its transaction open), then sends the locking statement with the COMMIT: when its
    rows are back the row is free and the write committed, before the block has even ended; nothing runs
    in the block after it."""
    client.messages.add("m", pgmem.Message(content="hello"))
    with client.executor.transaction(commit_pipelined=True) as block:
        assert block.rows("SELECT count(*) FROM pgmem.memories WHERE namespace = %(ns)s", {"ns": "test"}) == [(1,)]
        found = block.send_with_commit(
            "UPDATE pgmem.memories SET vec_rev = vec_rev + 1 WHERE namespace = %(ns)s AND key = 'm' RETURNING vec_rev",
            {"ns": "test"},
        )
        assert found == [(1,)]
        assert _lockable(dsn)
        with psycopg.connect(dsn) as other:
            assert other.execute("SELECT vec_rev FROM pgmem.memories WHERE key = 'm'").fetchone() == (1,)
        with pytest.raises(PgmemError, match="committed with its last statement"):
            block.rows("SELECT 1")
    assert client.vectors.head_rev("m") == 1
    client.messages.add("m", pgmem.Message(content="the connection works on"))
    assert client.messages.count("m") == 2


def test_the_statement_and_its_commit_leave_in_one_write(dsn: str) -> None:
    """What the client sends, recorded by a proxy: the statement and its COMMIT arrive in one chunk, so the
    server never waits for this process between them with the row locked."""
    params = conninfo_to_dict(dsn)
    host, port = str(params.get("host") or "localhost"), int(params.get("port") or 5432)

    def upstream() -> socket.socket:
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(f"{host}/.s.PGSQL.{port}")
            return sock
        return socket.create_connection((host, port))

    with Proxy(upstream) as proxy:
        through = make_conninfo(dsn, host="127.0.0.1", hostaddr="127.0.0.1", port=str(proxy.port))
        with pgmem.connect(through, namespace="test", max_size=1) as client:
            client.messages.add("m", pgmem.Message(content="hello"))
            marker = "one_write_marker"
            proxy.sent = []
            with client.executor.transaction(commit_pipelined=True) as block:
                block.rows("SELECT 1")
                block.send_with_commit(
                    f"UPDATE pgmem.memories SET vec_rev = vec_rev + 1 WHERE namespace = %(ns)s AND key = 'm' "
                    f"RETURNING vec_rev AS {marker}",
                    {"ns": "test"},
                )
            sent = list(proxy.sent)
        carrying = [chunk for chunk in sent if marker.encode() in chunk]
        assert len(carrying) == 1 and b"COMMIT" in carrying[0], sent
        assert not any(b"COMMIT" in chunk for chunk in sent if chunk is not carrying[0])  # one COMMIT only


def test_without_commit_pipelined_the_statement_runs_at_once(client: pgmem.Client, dsn: str) -> None:
    """The control: in a plain block the statement runs when sent, and its lock is held until the commit."""
    client.messages.add("m", pgmem.Message(content="hello"))
    with client.executor.transaction() as block:
        assert block.send_with_commit(LOCK_MEMORY, {"ns": "test"}) == [("m",)]
        assert not _lockable(dsn)
    assert _lockable(dsn)


def test_an_error_of_the_last_statement_rolls_the_block_back(dsn: str) -> None:
    """All or nothing: the statement's error is raised, what the block wrote before is gone, and the
    client's one connection works on."""
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.messages.add("m", pgmem.Message(content="hello"))
        with pytest.raises(PgmemError, match="division by zero"):
            with client.executor.transaction(commit_pipelined=True) as block:
                block.command(
                    "UPDATE pgmem.memories SET vec_rev = 7 WHERE namespace = %(ns)s AND key = 'm'", {"ns": "test"}
                )
                block.send_with_commit("SELECT 1 / 0", {})
        assert client.vectors.head_rev("m") == 0
        client.messages.add("m", pgmem.Message(content="again"))
        assert client.messages.count("m") == 2


def test_a_block_that_raises_before_its_last_statement_rolls_back(dsn: str) -> None:
    """The block's own exception passes as it is, and what it wrote is gone."""
    with pgmem.connect(dsn, namespace="test", max_size=1) as client:
        client.messages.add("m", pgmem.Message(content="hello"))
        with pytest.raises(KeyError):
            with client.executor.transaction(commit_pipelined=True) as block:
                block.command(
                    "UPDATE pgmem.memories SET vec_rev = 7 WHERE namespace = %(ns)s AND key = 'm'", {"ns": "test"}
                )
                raise KeyError("the caller's")
        assert client.vectors.head_rev("m") == 0
        assert client.messages.count("m") == 1


def test_the_embedder_decides_a_merge_that_began_waiting_after_its_claim(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedder sends its store with the COMMIT when no entry of its batch waited for a merge at the
    claim. An entry that began waiting between the claim and the store (here: the claim made blind to
    them) comes back from the store and is decided right after the commit: merged as when it was seen."""
    claim = pgmem._sync.outbox.Q["claim_outbox"]
    blind, n = re.subn(
        r"EXISTS \(SELECT 1 FROM pgmem\.memory_entries.*?AS merging", "false AS merging", claim, flags=re.S
    )
    assert n == 1
    monkeypatch.setitem(pgmem._sync.outbox.Q, "claim_outbox", blind)
    decided: list[int] = []
    merge_waiting = pgmem._sync.outbox.merge_waiting

    def spy(block: Any, model: Any, waiting: Any, **kwargs: Any) -> list[str]:
        decided.append(len(waiting))
        return merge_waiting(block, model, waiting, **kwargs)

    monkeypatch.setattr(pgmem._sync.outbox, "merge_waiting", spy)
    hashing = HashingEmbedder()
    with (
        pgmem.connect(dsn, namespace="test", max_size=2) as embedding,
        pgmem.connect(dsn, namespace="test", max_size=2, embedder=Precomputed(hashing.model, 384)) as writer,
    ):
        embedding.vectors.enable("facts", hashing)
        found = [writer.messages.remember("facts", pgmem.Message(content=v), threshold=0.9) for v in VARIANTS]
        assert all(f.pending for f in found)
        assert embedding.vectors.embed_pending(hashing).embedded == 3
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT seen_count, merge_within IS NULL FROM pgmem.memory_entries WHERE memory = 'facts'"
            ).fetchall()
            head = conn.execute("SELECT vec_rev FROM pgmem.memories WHERE key = 'facts'").fetchone()
    assert decided == [3]  # after the commit, in a transaction of its own
    assert rows == [(3, True)]
    assert head is not None and head[0] >= 3  # the three vectors were logged, and the two merged away left


async def test_async_the_last_statement_goes_with_the_commit(aclient: pgmem.AsyncClient, dsn: str) -> None:
    """The same through the async client, and its background embedder stores and logs the vectors."""
    hashing = HashingEmbedder()
    await aclient.vectors.enable("m", hashing)
    await aclient.messages.add("m", pgmem.Message(content="hello"))
    await aclient.vectors.flush(hashing)
    assert await aclient.vectors.head_rev("m") == 1
    async with aclient.executor.transaction(commit_pipelined=True) as block:
        assert await block.rows("SELECT 1") == [(1,)]
        found = await block.send_with_commit(
            "UPDATE pgmem.memories SET vec_rev = vec_rev + 1 WHERE namespace = %(ns)s AND key = 'm' RETURNING vec_rev",
            {"ns": "test"},
        )
        assert found == [(2,)]
        assert _lockable(dsn)
    assert await aclient.vectors.head_rev("m") == 2


def test_a_statements_error_is_raised_over_the_pipelines_abort() -> None:
    """psycopg, leaving a pipeline, may raise the COMMIT's "pipeline aborted" over the error the statement
    before it got (the second of its two reads replaces the first): the block raises the statement's error,
    which says why nothing committed, not a lost connection (a CI run of the suite saw that)."""
    from pgmem._sync.executor import statement_error

    refused = psycopg.errors.RaiseException("no space left on device (test)")
    try:
        try:
            raise refused
        finally:
            raise psycopg.errors.PipelineAborted("pipeline aborted")
    except psycopg.Error as exc:
        assert statement_error(exc) is refused
    alone = psycopg.errors.PipelineAborted("pipeline aborted")
    assert statement_error(alone) is alone
    assert statement_error(refused) is refused
