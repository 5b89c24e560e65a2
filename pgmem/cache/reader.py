"""The cache's own connection to Postgres and the statements it reads with.

The cache reads on connections of its own (this reader and the listener's), never the client's pool: it
serves a sync and an async client alike, and the strict mode's high-water-mark check, the hottest read,
is a statement prepared once and run through libpq. The connection acts as the client's role for the
client's namespace (row-level security), set once for the session.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import pq

from pgmem.embeddings import Vectors
from pgmem.errors import PgmemError, translate
from pgmem.planning import statements as _queries
from pgmem.planning.distances import max_distance
from pgmem.planning.rows import LineageHeadRow, MemoryVectorRow, VectorChangeRow
from pgmem.planning.search import (
    EmbeddingModel,
    SearchFilters,
    forked,
    statement,
    switched,
    unpack_vectors,
    vector_hits,
)

if TYPE_CHECKING:
    from pgmem import AsyncClient, Client

__all__ = ["MESSAGES", "Q", "ModelChanged", "Reader"]

Q = _queries.load("vectors")
MESSAGES = _queries.load("messages")
FORKS = _queries.load("forks")
_HEAD_STATEMENT = b"pgmem_cache_head"
_TUPLES_OK = pq.ExecStatus.TUPLES_OK


class ModelChanged(Exception):
    """The memory is searched with another model now: drop the entry, look the model up again."""


class Reader:
    """The cache's reading connection, connected (and its head statement prepared) on first use and again
    after it broke. :attr:`lock` serialises its use; methods that say so expect it held.

    Args:
        client: the client whose namespace and role the connection takes.
        conninfo: where to connect (the client's, password included: never logged).
    """

    def __init__(self, client: Client | AsyncClient, conninfo: str) -> None:
        self._client = client
        self._conninfo = conninfo
        self._namespace_bytes = client.namespace.encode()
        self.lock = threading.Lock()
        self.conn: psycopg.Connection[Any] | None = None
        self.head_prepared = False  # the head statement is prepared on conn (a UTF-8 connection)
        # The server's incarnations this reader has connected to, counted: the count moves when a new
        # connection finds another server start time (a restart, a failover). Revisions read from one
        # incarnation say nothing about another's: a background embedder's commit is asynchronous, and one
        # a crash lost may have been read, after which the restarted server reuses its revision.
        self.incarnation = 0
        self._started: Any = None
        # Memories seen to be forks that inherit (searched in Postgres through their lineage); see
        # AsyncForkRepository.known for why only these are remembered.
        self.forks: set[str] = set()

    def read(self, name: str, params: dict[str, Any], queries: dict[str, Any] = Q) -> list[tuple[Any, ...]]:
        """Run a named query (of sql/vectors.sql unless ``queries`` says otherwise), reconnecting once if the
        connection broke."""
        params = {"ns": self._client.namespace, **params}
        with translate(), self.lock:  # a driver error leaves as pgmem's (ConnectionFailed, ...)
            for attempt in (1, 2):
                try:
                    reader = self.connection()
                    cur = reader.execute(queries[name], params, binary=True, prepare=True)
                    return cur.fetchall() if cur.pgresult is not None and cur.pgresult.status == _TUPLES_OK else []
                except psycopg.OperationalError:
                    self.drop()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def memory_vectors(
        self, memory: str, model: EmbeddingModel
    ) -> tuple[int, list[str], Vectors, tuple[tuple[str, int], ...]]:
        """The memory's revision, its message ids and vectors under ``model`` (a full load; a fork's include
        what it inherits), and for a fork the memories it inherits from with their revisions (else ``()``)."""
        rows = self.read("memory_vectors", {"memory": memory, "model": model.id})
        found = [MemoryVectorRow._make(row) for row in rows]
        rev = int(found[0].rev) if found else 0
        inherited: tuple[tuple[str, int], ...] = ()
        if found and found[0].ancestors:
            inherited = tuple(zip(found[0].ancestors, map(int, found[0].ancestor_revs or ()), strict=True))
        kept = [(r.message_id, r.vector) for r in found if r.message_id is not None and r.vector is not None]
        if inherited:  # a message is held once, but a lineage is read range by range: keep the first
            seen: set[str] = set()
            kept = [(i, v) for i, v in kept if not (i in seen or seen.add(i))]  # type: ignore[func-returns-value]
        return rev, [i for i, _ in kept], unpack_vectors([v for _, v in kept], model.dimension), inherited

    def lineage_heads(self, memory: str) -> dict[str, int]:
        """The revisions of ``memory`` and of the memories it inherits from (a fork's), by memory."""
        rows = map(LineageHeadRow._make, self.read("lineage_heads", {"memory": memory}))
        return {r.memory: int(r.vec_rev) for r in rows}

    def changes(self, memory: str, model: EmbeddingModel, rev: int) -> tuple[int, Any, list[tuple[Any, ...]]]:
        """The memory's head revision, the vector log's floor, and its ``(rev, op, message id, vector)``
        changes after ``rev``.

        Raises:
            ModelChanged: the memory's active model is not ``model`` any more.
        """
        rows = self.read("vector_changes", {"memory": memory, "model": model.id, "rev": rev})
        found = [VectorChangeRow._make(row) for row in rows]
        if found and found[0].active is not None and found[0].active != model.id:
            raise ModelChanged
        head = int(found[0].head or 0) if found else 0
        floor = found[0].floor if found else None
        changes = [r for r in found if r.rev is not None]
        added = [r.vector for r in changes if r.vector is not None]
        vectors = iter(unpack_vectors(added, model.dimension))
        return head, floor, [(r.rev, r.op, r.message_id, None if r.vector is None else next(vectors)) for r in changes]

    def head(self, memory: str) -> int:
        """The memory's high-water mark (one primary-key read).

        The strict mode's check before every answer, so it skips psycopg's cursor layer: a statement
        prepared once on the reader connection, run through libpq with a binary result (at 1k vectors
        per memory the check cost 54 µs through a cursor against 19 µs for a prepared ``SELECT 1``).
        """
        with translate(), self.lock:
            reader = self.conn
            if reader is not None and self.head_prepared:  # the usual case, in as few steps as it takes
                try:
                    res = reader.pgconn.exec_prepared(
                        _HEAD_STATEMENT, [self._namespace_bytes, memory.encode()], result_format=1
                    )
                except psycopg.OperationalError:
                    res = None  # the connection is gone: reconnect below
                if res is not None and res.status == _TUPLES_OK:
                    value = res.get_value(0, 0) if res.ntuples else None
                    return 0 if value is None else int.from_bytes(value, "big", signed=True)
            for attempt in (1, 2):
                try:
                    pgconn = self.connection().pgconn
                    if not self.head_prepared:
                        return self._head_by_cursor(memory)
                    res = pgconn.exec_prepared(
                        _HEAD_STATEMENT, [self._namespace_bytes, memory.encode()], result_format=1
                    )
                    if res.status == pq.ExecStatus.TUPLES_OK:
                        value = res.get_value(0, 0) if res.ntuples else None
                        return 0 if value is None else int.from_bytes(value, "big", signed=True)
                    message = (res.error_message or b"").decode("utf-8", "replace").strip()
                    if pgconn.status == pq.ConnStatus.OK:
                        raise PgmemError(f"reading the cache's high-water mark failed: {message}")
                    raise psycopg.OperationalError(message)
                except psycopg.OperationalError:
                    self.drop()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _head_by_cursor(self, memory: str) -> int:
        assert self.conn is not None
        params = {"ns": self._client.namespace, "memory": memory}
        rows = self.conn.execute(Q["cache_head"], params, binary=True, prepare=True).fetchall()
        return int(rows[0][0]) if rows else 0

    def send_head(self, memory: str) -> Any | None:
        """Send the memory's high-water-mark read without waiting for it (call with the lock held); its
        pgconn, for :meth:`head_result`, or None when there is no prepared connection now (or it broke:
        then it is dropped)."""
        reader = self.conn
        if reader is None or reader.closed or not self.head_prepared:
            return None
        pgconn = reader.pgconn
        try:
            pgconn.send_query_prepared(_HEAD_STATEMENT, [self._namespace_bytes, memory.encode()], result_format=1)
        except psycopg.OperationalError:
            self.drop()
            return None
        return pgconn

    def head_result(self, pgconn: Any) -> int | None:
        """Collect the high-water mark sent by :meth:`send_head` (call with the lock held); None if the
        connection broke (it is dropped: the catch-up that follows reconnects)."""
        value: int | None = None
        error: str | None = None
        while (res := pgconn.get_result()) is not None:
            if res.status == pq.ExecStatus.TUPLES_OK:
                raw = res.get_value(0, 0) if res.ntuples else None
                value = 0 if raw is None else int.from_bytes(raw, "big", signed=True)
            else:
                error = (res.error_message or b"").decode("utf-8", "replace").strip()
        if error is None and value is not None:
            return value
        if pgconn.status == pq.ConnStatus.OK:
            raise PgmemError(f"reading the cache's high-water mark failed: {error}")
        self.drop()
        return None

    def search(
        self,
        memory: str,
        model: EmbeddingModel,
        queries: Vectors,
        k: int,
        threshold: float | None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """An exact search in Postgres, for a memory larger than the whole budget, of a model not ranked by
        cosine distance, or filtered on ``metadata``.

        Raises:
            ModelChanged: the memory's active model is not ``model`` any more.
        """
        filters = SearchFilters(memory=memory, metadata=metadata, lineage=memory in self.forks)
        out = []
        for q in queries:
            while True:  # twice for a fork not known yet: then through its lineage (fork_guard_sql)
                query = statement("vector", model, filters, "exact", k, threshold is not None)
                params: dict[str, Any] = {"q": q, **filters.params()}
                if threshold is not None:
                    params["max_distance"] = max_distance(model.distance, threshold)
                with self.lock:
                    rows = self.connection().execute(query, {"ns": self._client.namespace, **params}).fetchall()
                if rows and switched(rows[0]):
                    raise ModelChanged
                if filters.lineage or not (forked(rows[0]) if rows else self.inherits(memory)):
                    break
                self.forks.add(memory)
                filters = replace(filters, lineage=True)
            out.append([(hit.message.id, hit.score) for hit in vector_hits(rows, model.distance)])
        return out

    def inherits(self, memory: str) -> bool:
        """Whether ``memory`` is a fork that still reads its parent's entries."""
        return bool(self.read("inherits", {"memory": memory}, FORKS)[0][0])

    def connection(self) -> psycopg.Connection[Any]:
        """The connection (call with the lock held), connected and prepared on demand."""
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.Connection.connect(self._conninfo, autocommit=True)
            # Row-level security: the client's role (pgmem_app when the DSN's role bypasses it) and, for the
            # whole session, the client's namespace. Session-wide, unlike the clients' per-transaction
            # setting: this connection is the cache's own and serves one namespace only, and the strict
            # mode's head check (a bare libpq call) stays one statement.
            role = self._client.sessions.role
            if role is not None:
                self.conn.execute("SELECT set_config('role', %s, false)", (role,))
            row = self.conn.execute(
                "SELECT set_config('pgmem.namespace', %s, false), pg_postmaster_start_time()",
                (self._client.namespace,),
            ).fetchone()
            started = None if row is None else row[1]
            if self._started is not None and started != self._started:
                self.incarnation += 1
            self._started = started
            register_vector(self.conn)  # query vectors of the searches it runs in Postgres
            self.head_prepared = False
            if self.conn.info.encoding == "utf-8":  # the key travels as UTF-8 bytes
                res = self.conn.pgconn.prepare(_HEAD_STATEMENT, Q["cache_head_libpq"].encode())
                self.head_prepared = res.status == pq.ExecStatus.COMMAND_OK
        return self.conn

    def drop(self) -> None:
        """Close the connection (call with the lock held); the next read reconnects."""
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def close(self) -> None:
        with self.lock:
            self.drop()
