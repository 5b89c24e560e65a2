"""Read replicas: searches leave the primary, read-your-writes holds, a lagging or dead replica is skipped.

One private primary with two streaming replicas for the module (tests/integration/_replica_cluster.py:
``pg_basebackup -R`` from the embedded package's binaries); each test works in its own namespace and puts
the replicas back as it found them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgmem
from tests.integration._replica_cluster import Cluster, Server

DIM = 16


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    from pgmem.ops.migrate import upgrade

    started = Cluster().start()
    try:
        upgrade(started.primary.dsn)
        started.add_replica()
        started.add_replica()
        yield started
    finally:
        started.close()


def _vector(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i % DIM] = 1.0
    v[(i + 3) % DIM] = 0.5
    return v


class NoteEmbedder:
    """``note i`` -> a vector close to ``_vector(i)`` only."""

    model = "replica-notes-16"
    dimension = DIM

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        return np.array([_vector(int(t.split()[-1])) for t in texts], dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> Any:
        return self.embed(texts)


def _connect(cluster: Cluster, namespace: str, **kwargs: Any) -> pgmem.Client:
    client = pgmem.connect(cluster.primary.dsn, namespace=namespace, embedder=NoteEmbedder(), **kwargs)
    client.vectors.enable("m")
    return client


def _put(client: pgmem.Client, memory: str, i: int) -> str:
    """A message with a known vector, embedded before this returns (the client's writes, on the primary)."""
    message = pgmem.Message(content=f"note {i}")
    assert client.messages.add(memory, message)
    client.vectors.flush()
    return message.id


def _xacts(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
        assert row is not None
        return int(row[0])


def _reads(client: pgmem.Client) -> list[int]:
    stats = client.replica_stats()
    assert stats is not None
    return [r.reads for r in stats.replicas]


def _superuser(server: Server, sql: str) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _served(cluster: Cluster, searches: int) -> list[int]:
    """Transactions each server committed (primary first) while a client with both replicas connected,
    ran ``searches`` searches and closed: the servers' own counts (backends report theirs as they exit)."""
    before = [_xacts(s.dsn) for s in (cluster.primary, *cluster.replicas)]
    with _connect(cluster, "routed", replicas=[r.dsn for r in cluster.replicas]) as client:
        for i in range(searches):
            hits = client.vectors.search(vector=_vector(i), memory="m", k=3)
            assert hits[0].message.content == f"note {i % DIM}"
        stats = client.replica_stats()
        assert stats is not None
        assert (stats.primary, stats.off_primary) == (0, 1.0)
        assert [r.reads for r in stats.replicas] == [(searches + 1) // 2, searches // 2]  # round the ring
    time.sleep(0.5)
    return [_xacts(s.dsn) - b - 1 for s, b in zip((cluster.primary, *cluster.replicas), before, strict=True)]


def test_searches_are_served_by_the_replicas(cluster: Cluster) -> None:
    with _connect(cluster, "routed") as writer:
        for i in range(DIM):
            _put(writer, "m", i)
    cluster.wait_streaming()
    time.sleep(0.5)  # the writer's backends report their transactions as they exit
    one = _served(cluster, 1)
    many = _served(cluster, 61)
    # The primary's work is the client's start (schema, model, planner checks), whatever its searches.
    assert abs(many[0] - one[0]) <= 3, (one, many)
    # Each replica ran its 30 searches (and set up the connections of its pool: a few more).
    assert all(m - o >= 30 for m, o in zip(many[1:], one[1:], strict=True)), (one, many)
    with _connect(cluster, "routed", replicas=[r.dsn for r in cluster.replicas]) as client:
        assert client.vectors.search_many(vectors=[_vector(1), _vector(2)], memory="m", k=2)[1][0].message.content
        assert client.vectors.hybrid_search("note 3", memory="m", k=2)
        stats = client.replica_stats()
        assert stats is not None and stats.primary == 0 and [r.reads for r in stats.replicas] == [1, 1]
        # A read that followed a use of the primary (the model, the planner's count of a new filter) asked
        # where the primary's WAL is.
        assert 1 <= stats.position_checks <= 2


def test_a_read_after_a_write_waits_for_the_replica(cluster: Cluster) -> None:
    """A replica that applies WAL 300 ms late: the search after a write waits for it and finds the write."""
    replica = cluster.replicas[0]
    _superuser(replica, "ALTER SYSTEM SET recovery_min_apply_delay = '300ms'")
    _superuser(replica, "SELECT pg_reload_conf()")
    try:
        with _connect(cluster, "ryw", replicas=[replica.dsn], replica_wait=5) as client:
            for i in range(5):
                wrote = _put(client, "m", i)
                hits = client.vectors.search(vector=_vector(i), memory="m", k=1)
                assert [h.message.id for h in hits] == [wrote]
            stats = client.replica_stats()
            assert stats is not None
            [seen] = stats.replicas
            assert (seen.reads, stats.primary, seen.skipped_lag) == (5, 0, 0)
            assert seen.waited == 5  # each read polled the replica until it had applied the write
            assert stats.position_checks == 5
            # Reads that follow reads do not ask the primary again.
            for _ in range(3):
                client.vectors.search(vector=_vector(0), memory="m", k=1)
            stats = client.replica_stats()
            assert stats is not None and stats.position_checks == 5 and stats.replicas[0].reads == 8
    finally:
        _superuser(replica, "ALTER SYSTEM RESET recovery_min_apply_delay")
        _superuser(replica, "SELECT pg_reload_conf()")
        cluster.wait_streaming()


def test_a_lagging_replica_is_skipped_for_the_primary(cluster: Cluster) -> None:
    replica = cluster.replicas[0]
    with _connect(cluster, "lag", replicas=[replica.dsn], replica_wait=0.3) as client:
        _put(client, "m", 0)
        assert client.vectors.search(vector=_vector(0), memory="m", k=1)
        assert _reads(client) == [1]
        client.replicas.backoff = 0.5  # type: ignore[union-attr]
        _superuser(replica, "SELECT pg_wal_replay_pause()")
        try:
            wrote = _put(client, "m", 1)
            hits = client.vectors.search(vector=_vector(1), memory="m", k=1)
            assert [h.message.id for h in hits] == [wrote]  # read on the primary
            stats = client.replica_stats()
            assert stats is not None
            assert (stats.replicas[0].state, stats.replicas[0].skipped_lag, stats.primary) == ("lagging", 1, 1)
            # While it lags, reads do not wait for it again.
            assert client.vectors.search(vector=_vector(1), memory="m", k=1)
            stats = client.replica_stats()
            assert stats is not None and (stats.replicas[0].skipped_lag, stats.primary) == (2, 2)
            assert stats.replicas[0].waited == 0
        finally:
            _superuser(replica, "SELECT pg_wal_replay_resume()")
        cluster.wait_streaming()
        time.sleep(0.5)  # the back-off
        assert [h.message.id for h in client.vectors.search(vector=_vector(1), memory="m", k=1)] == [wrote]
        stats = client.replica_stats()
        assert stats is not None and (stats.replicas[0].state, stats.replicas[0].reads) == ("up", 2)


def test_a_killed_replica_is_skipped_and_used_again_when_back(cluster: Cluster) -> None:
    replica = cluster.replicas[1]
    with _connect(cluster, "kill", replicas=[replica.dsn]) as client:
        client.replicas.backoff = 0.3  # type: ignore[union-attr]
        wrote = _put(client, "m", 0)
        assert [h.message.id for h in client.vectors.search(vector=_vector(0), memory="m", k=1)] == [wrote]
        assert _reads(client) == [1]
        replica.kill()
        try:
            for _ in range(3):  # the first finds its connection dead, the others skip it
                assert [h.message.id for h in client.vectors.search(vector=_vector(0), memory="m", k=1)] == [wrote]
            stats = client.replica_stats()
            assert stats is not None
            assert (stats.replicas[0].state, stats.replicas[0].skipped_down, stats.primary) == ("down", 3, 3)
            time.sleep(0.3)  # past the back-off, still down: refused at once, skipped again
            assert client.vectors.search(vector=_vector(0), memory="m", k=1)
            stats = client.replica_stats()
            assert stats is not None and (stats.replicas[0].skipped_down, stats.primary) == (4, 4)
        finally:
            replica.start()
        cluster.wait_streaming()
        time.sleep(0.3)
        assert [h.message.id for h in client.vectors.search(vector=_vector(0), memory="m", k=1)] == [wrote]
        stats = client.replica_stats()
        assert stats is not None and (stats.replicas[0].state, stats.replicas[0].reads) == ("up", 2)


async def test_async_client_and_the_environment(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGMEM_REPLICA_DSNS", ",".join(r.dsn for r in cluster.replicas))
    monkeypatch.setenv("PGMEM_REPLICA_WAIT", "2")
    async with await pgmem.aconnect(cluster.primary.dsn, namespace="async", embedder=NoteEmbedder()) as client:
        assert client.replicas is not None and client.replicas.wait == 2.0
        await client.vectors.enable("m")
        message = pgmem.Message(content="note 5")
        assert await client.messages.add("m", message)
        await client.vectors.flush()
        hits = await client.vectors.search(vector=_vector(5), memory="m", k=1)
        assert [h.message.id for h in hits] == [message.id]
        async with client.read_connection() as conn:
            cur = await conn.execute("SELECT pg_is_in_recovery()")
            assert await cur.fetchone() == (True,)
        stats = client.replica_stats()
        assert stats is not None and sum(r.reads for r in stats.replicas) == 2 and stats.primary == 0


def test_read_connection_is_read_only_on_the_replica(cluster: Cluster) -> None:
    with pgmem.connect(cluster.primary.dsn, namespace="ro", replicas=[cluster.replicas[0].dsn]) as client:
        with client.read_connection() as conn:
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute("CREATE TABLE nope (x int)")
    with pgmem.connect(cluster.primary.dsn, namespace="ro") as client:
        assert client.replicas is None and client.replica_stats() is None
        with client.read_connection() as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)


def test_bad_replica_options_are_refused(cluster: Cluster) -> None:
    for replicas, wait in (("host=x", 1.0), ([1], 1.0), ([""], 1.0), (["host=x"], -1), (["host=x"], float("nan"))):
        with pytest.raises(pgmem.InvalidInput):
            pgmem.connect(cluster.primary.dsn, replicas=replicas, replica_wait=wait)  # type: ignore[arg-type]
    with psycopg.connect(cluster.primary.dsn, autocommit=True) as conn:
        with pytest.raises(pgmem.InvalidInput, match="pool"):
            pgmem.connect(conn, replicas=[cluster.replicas[0].dsn])


def _commits_rise(server: Server, before: int, at_least: int) -> int:
    """Transactions ``server`` committed since ``before`` (read by :func:`_xacts`), once at least
    ``at_least`` have been reported (backends report theirs as they exit), or after 10 s."""
    give_up = time.monotonic() + 10
    while True:
        done = _xacts(server.dsn) - before - 1
        if done >= at_least or time.monotonic() > give_up:
            return done
        time.sleep(0.1)


def test_report_and_stats_read_from_a_replica(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from pgmem.ops.cli import app
    from pgmem.ops.report import write_report

    replica = cluster.replicas[0]
    with _connect(cluster, "report") as writer:
        _put(writer, "m", 1)
    cluster.wait_streaming()
    dead = f"host={cluster.root} port=1 user=postgres dbname=postgres connect_timeout=2"
    before = _xacts(replica.dsn)
    written = write_report(cluster.primary.dsn, tmp_path / "r.html", replicas=[dead, replica.dsn])
    assert written.messages >= 1
    assert _commits_rise(replica, before, 1) >= 1  # the report's snapshot was the replica's

    monkeypatch.setenv("PGMEM_REPLICA_DSNS", replica.dsn)
    before = _xacts(replica.dsn)
    result = CliRunner().invoke(app, ["stats", "--dsn", cluster.primary.dsn])
    assert result.exit_code == 0, result.output
    assert _commits_rise(replica, before, 7) >= 7  # its seven queries


def test_message_stats_read_from_a_replica(cluster: Cluster) -> None:
    with _connect(cluster, "mstats", replicas=[cluster.replicas[0].dsn]) as client:
        _put(client, "m", 2)
        rows = client.messages.stats()
        assert [(r.namespace, r.memory, r.messages) for r in rows] == [("mstats", "m", 1)]  # the write, seen
        assert _reads(client) == [1]
