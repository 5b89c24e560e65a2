"""Maintenance across namespaces, for the owner of pgmem's tables (a DBA's tool, not a client's).

Every function takes a connection (autocommit, as the role that runs ``pgmem migrate``) and raises
:class:`~pgmem.errors.PermissionDenied` for any other role, before touching anything. A client, scoped to
one namespace, has no way to any of this.

Example:
    >>> import psycopg, pgmem.admin
    >>> with psycopg.connect(owner_dsn, autocommit=True) as conn:
    ...     pgmem.admin.purge_expired(conn)  # expired brains of every namespace
    ...     pgmem.admin.run_retention(conn)  # every namespace's retention policies
    {'tenantA': 3}
    {'tenantA': {'messages': 120, 'queue_history': 0, ...}}

The async twins, same names, are in ``pgmem.admin.aio``.
"""

from __future__ import annotations

from pgmem._async import admin as aio
from pgmem._sync.admin import namespaces, namespaces_with_pending, purge_expired, run_retention

__all__ = ["aio", "namespaces", "namespaces_with_pending", "purge_expired", "run_retention"]
