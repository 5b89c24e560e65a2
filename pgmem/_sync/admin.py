# Generated from pgmem/_async by tools/gen_sync.py: edit the async source, then regenerate.
"""Maintenance across namespaces: an administrator's operations, on the tables' owner's connection.

A client is scoped to one namespace and nothing it offers reaches another one (row-level security
enforces it below pgmem). What a DBA runs for every tenant at once lives here instead, as functions of a
connection, never methods of a client: each one lists the namespaces concerned in an
:func:`~pgmem._async.executor.admin_block` (which refuses a role that does not own pgmem's tables:
:class:`~pgmem.errors.PermissionDenied`), then does each namespace's work through a client scoped to it,
so the per-namespace code is the very code a tenant runs on its own.

Give an autocommit connection (``psycopg.connect(owner_dsn, autocommit=True)``): the batches of a purge
then commit one by one, as a client's do. On a connection inside a transaction they all join it.

Public as :mod:`pgmem.admin` (sync) and ``pgmem.admin.aio`` (async).
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from pgmem._sync.client import Client
from pgmem._sync.executor import admin_block
from pgmem._sync.retention import DEFAULT_BATCH
from pgmem.planning import statements as queries

__all__ = ["namespaces", "namespaces_with_pending", "purge_expired", "run_retention"]

Q = queries.load("retention")
VQ = queries.load("vectors")


def namespaces(conn: Connection[Any], *, with_policies: bool = False) -> list[str]:
    """Every namespace holding something retention removes (archives, expired brains, logs), or, with
    ``with_policies``, every namespace that has a retention policy.

    Raises:
        PermissionDenied: the connection's role does not own pgmem's tables.
    """
    with admin_block(conn) as block:
        return [str(row[0]) for row in block.rows(Q["policy_namespaces" if with_policies else "namespaces"])]


def namespaces_with_pending(conn: Connection[Any]) -> list[str]:
    """Every namespace with messages waiting for an embedding (``pgmem embed`` without ``--namespace``
    walks them, embedding each through a client scoped to it).

    Raises:
        PermissionDenied: the connection's role does not own pgmem's tables.
    """
    with admin_block(conn) as block:
        return [str(row[0]) for row in block.rows(VQ["outbox_namespaces"])]


def purge_expired(conn: Connection[Any], *, batch_size: int = 500) -> dict[str, int]:
    """Purge the expired brains of every namespace (``client.brains.purge_expired`` does one namespace).
    Returns the brains purged per namespace (only namespaces that had some).

    Raises:
        PermissionDenied: the connection's role does not own pgmem's tables (nothing was purged).
    """
    with admin_block(conn) as block:
        found = [str(row[0]) for row in block.rows(Q["expired_namespaces"])]
    purged: dict[str, int] = {}
    for ns in found:
        client = Client(namespace=ns, connection=conn)
        purged[ns] = client.retention.purge_expired_brains(batch_size=batch_size)
    return purged


def run_retention(
    conn: Connection[Any], *, batch_size: int = DEFAULT_BATCH, actor: str | None = None
) -> dict[str, dict[str, int]]:
    """Apply the retention policies of every namespace that has some (``client.retention.run`` does one
    namespace). Returns the rows removed per namespace and target.

    Raises:
        PermissionDenied: the connection's role does not own pgmem's tables (nothing was removed).
    """
    removed: dict[str, dict[str, int]] = {}
    for ns in namespaces(conn, with_policies=True):
        client = Client(namespace=ns, connection=conn)
        removed[ns] = client.retention.run(batch_size=batch_size, actor=actor)
    return removed
