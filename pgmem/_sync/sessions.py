# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Session state of the connections a client uses: the role, pgvector's types and the HNSW settings."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from psycopg import Connection
from psycopg.types import TypeInfo

from pgmem.planning.adapters import register_fast_adapters, register_vector_types

__all__ = ["SESSION_EF_SEARCH", "Sessions"]

#: The session's ``hnsw.ef_search`` on the client's own connections; searches with a larger k raise it
#: for their transaction.
SESSION_EF_SEARCH = 40


_SESSION = "set_config('hnsw.iterative_scan', 'relaxed_order', false), set_config('hnsw.ef_search', %s, false)"
_AS_ROLE = "SELECT set_config('role', %s, false), "


class Sessions:
    """What a client knows of each connection's session, kept by the client (shared by the clients of one
    pool, see ``with_namespace``), not by the module: which connections have pgvector's types registered,
    which are the pool's own (set up by :meth:`configure`, so their session settings are pgmem's to change)
    and, on those, whether ``hnsw.iterative_scan`` is on. Entries go with their connections (weak keys)."""

    def __init__(
        self,
        vector_types: Mapping[str, TypeInfo] | None = None,
        *,
        role: str | None = None,
        owner_conninfo: str | None = None,
    ) -> None:
        # pgvector's types in the pool's database, read by the schema check (pgmem.planning.adapters).
        self._vector_types = vector_types
        #: The role the pool's connections act as (``SET ROLE`` in :meth:`configure`): pgmem's application
        #: role when the login role is not held by row-level security; None: the login role as it is.
        self.role = role
        #: A DSN of the tables' owner, for the DDL the application role may not run (a model's HNSW index);
        #: None when the client has none. It may hold a password: never print it.
        self.owner_conninfo = owner_conninfo
        self._typed: weakref.WeakSet[Any] = weakref.WeakSet()
        self._own: weakref.WeakSet[Any] = weakref.WeakSet()
        self._iterative: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    def configure(self, conn: Connection[Any]) -> None:
        """The pool's ``configure`` hook: pgvector's types (from the types the schema check read: no
        query), pgmem's faster adapters (:mod:`pgmem.planning.adapters`), iterative HNSW scans for
        filtered searches and, when the login role is not held by row-level security, ``SET ROLE`` to the
        application role (one query)."""
        if self._vector_types is None:
            _register_vector(conn)
        else:
            register_vector_types(conn, self._vector_types)
        register_fast_adapters(conn)
        if self.role is not None:  # a failure leaves the connection unused: the pool drops it
            conn.execute(_AS_ROLE + _SESSION, (self.role, str(SESSION_EF_SEARCH)))
        else:
            conn.execute("SELECT " + _SESSION, (str(SESSION_EF_SEARCH),))
        self._typed.add(conn)
        self._own.add(conn)
        self._iterative[conn] = True

    def ready(self, conn: Connection[Any]) -> None:
        """Register pgvector's types on a connection pgmem did not set up (the caller's), once."""
        if conn not in self._typed:
            _register_vector(conn)
            self._typed.add(conn)

    def own(self, conn: Connection[Any]) -> bool:
        """Whether the connection's session settings are pgmem's (a pool connection it configured)."""
        return conn in self._own

    def iterative(self, conn: Connection[Any]) -> bool | None:
        """Whether ``hnsw.iterative_scan`` is on in the session (None: unknown)."""
        return self._iterative.get(conn)

    def set_iterative(self, conn: Connection[Any], value: bool | None) -> None:
        if value is None:
            self._iterative.pop(conn, None)
        else:
            self._iterative[conn] = value


def _register_vector(conn: Connection[Any]) -> None:
    """pgvector's ``register_vector``: looks the types up on ``conn`` (12 round trips)."""
    from pgvector.psycopg import register_vector  # the vector adapters load with the first vector

    register_vector(conn)
