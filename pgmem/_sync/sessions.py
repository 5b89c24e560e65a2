# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Session state of the connections a client uses: the role and pgvector's types. (The HNSW settings of a
search are local to its statement's transaction: see :func:`pgmem._async.search_planner.hnsw_settings`.)"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from psycopg import Connection
from psycopg.types import TypeInfo

from pgmem._sync.executor import Block
from pgmem.planning.adapters import register_fast_adapters, register_vector_types

__all__ = ["SESSION_EF_SEARCH", "Sessions"]

#: The smallest ``hnsw.ef_search`` of an index scan (pgvector's default); searches with a larger k raise
#: it for their transaction.
SESSION_EF_SEARCH = 40

_AS_ROLE = "SELECT set_config('role', %(role)s, false)"


class Sessions:
    """What a client knows of each connection's session, kept by the client (shared by the clients of one
    pool, see ``with_namespace``), not by the module: which connections have pgvector's types registered.
    Entries go with their connections (weak keys)."""

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

    def configure(self, conn: Connection[Any]) -> None:
        """The pool's ``configure`` hook: pgvector's types (from the types the schema check read: no
        query), pgmem's faster adapters (:mod:`pgmem.planning.adapters`) and, when the login role is not
        held by row-level security, ``SET ROLE`` to the application role (one query; none otherwise)."""
        if self._vector_types is None:
            _register_vector(conn)
        else:
            register_vector_types(conn, self._vector_types)
        register_fast_adapters(conn)
        if self.role is not None:  # a failure leaves the connection unused: the pool drops it
            Block(conn).command(_AS_ROLE, {"role": self.role})  # the session's: no namespace
        self._typed.add(conn)

    def ready(self, conn: Connection[Any]) -> None:
        """Register pgvector's types on a connection pgmem did not set up (the caller's), once."""
        if conn not in self._typed:
            _register_vector(conn)
            self._typed.add(conn)


def _register_vector(conn: Connection[Any]) -> None:
    """pgvector's ``register_vector``: looks the types up on ``conn`` (12 round trips)."""
    from pgvector.psycopg import register_vector  # the vector adapters load with the first vector

    register_vector(conn)
