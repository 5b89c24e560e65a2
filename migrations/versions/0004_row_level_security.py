"""row-level security by namespace, the application role, views with the caller's rights

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

Every table keyed by ``namespace`` (all but ``embedding_models``, a registry shared by the namespaces)
gets row-level security, enabled and FORCEd (the owner is subject to it too), and two policies:

- ``pgmem_namespace`` (every role): a row is visible and writable only when its namespace is the
  transaction's ``pgmem.namespace`` setting, which the client sets per transaction
  (``set_config('pgmem.namespace', ns, true)``, see ``pgmem/_async/scope.py``). A connection that set
  nothing sees no row: ``current_setting('pgmem.namespace', true)`` is NULL or '' and ``namespace = NULL``
  holds for no row.
- ``pgmem_admin`` (the migrating role only): every row, in a transaction that set ``pgmem.admin`` to
  ``on`` (``pgmem.security.admin_transaction``). The application role is not the migrating role, so the
  setting gives it nothing.

The NOLOGIN group role ``pgmem_app`` is created when missing, if the migrating role may create roles
(superuser or CREATEROLE; otherwise a notice, and ``pgmem roles create`` as a role that may). It gets
what the library needs and nothing more: USAGE on schema pgmem; SELECT, INSERT, UPDATE, DELETE on the
tables (SELECT, INSERT on ``embedding_models``; SELECT on ``alembic_version``); USAGE, SELECT on the
sequences; EXECUTE on pgmem's functions; SELECT on the views; MAINTAIN (PostgreSQL 17+: ANALYZE of the
search tables). Never ownership, never BYPASSRLS. Whether it exists or not, default privileges make the
tables and sequences later migrations create readable and writable by it.

The views run with the caller's rights (``security_invoker``): through them a role sees what row-level
security lets it see in the tables, no more.

For later migrations:

- A new table keyed by namespace needs, in the same migration::

      ALTER TABLE pgmem.t ENABLE ROW LEVEL SECURITY;
      ALTER TABLE pgmem.t FORCE ROW LEVEL SECURITY;
      CREATE POLICY pgmem_namespace ON pgmem.t USING (namespace = current_setting('pgmem.namespace', true))
          WITH CHECK (namespace = current_setting('pgmem.namespace', true));
      CREATE POLICY pgmem_admin ON pgmem.t TO CURRENT_USER
          USING (current_setting('pgmem.admin', true) = 'on') WITH CHECK (current_setting('pgmem.admin', true) = 'on');

  (tests/integration/test_row_level_security.py fails for a table that has a namespace and no forced
  row-level security). Its grants come from the default privileges when the same role migrates; a table
  the library may only read (like ``embedding_models``) needs its grants narrowed by hand.
- A new view needs ``WITH (security_invoker = true)`` and ``GRANT SELECT ... TO pgmem_app``; a new function
  is executable by everyone unless revoked.
- Migrations run as the owner with ``pgmem.admin`` on (migrations/env.py): a data migration sees every
  namespace.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The tables keyed by namespace at this revision (pgmem/ops/schema.py, all but embedding_models).
TABLES = (
    "memories",
    "messages",
    "memory_entries",
    "queue_items",
    "queue_archive_batches",
    "subscriptions",
    "memory_models",
    "embeddings",
    "embedding_outbox",
    "vector_log",
    "summaries",
    "brain_memories",
    "memory_stores",
    "store_files",
    "retrieval_log",
    "items",
    "item_vectors",
)

#: The views at this revision (sql/triggers.sql's queue_archive and sql/views.sql).
VIEWS = (
    "queue_archive",
    "conversation_facts",
    "role_activity",
    "action_activity",
    "action_flow",
    "who_talks_to_whom",
    "queue_health",
    "queue_throughput",
    "retrieval_hits",
    "summary_compression",
)

_SCOPED = "namespace = current_setting('pgmem.namespace', true)"
_ADMIN = "current_setting('pgmem.admin', true) = 'on'"

# The group role, when the migrating role may create it. A cluster-wide object: another database may
# have created it already, or a concurrent migration of another database may be creating it now.
_CREATE_APP_ROLE = """
DO $$
BEGIN
    IF to_regrole('pgmem_app') IS NULL THEN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
            BEGIN
                CREATE ROLE pgmem_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        ELSE
            RAISE NOTICE 'pgmem: role pgmem_app is missing and % may not create roles: run `pgmem roles create` '
                         'as a role that may', current_user;
        END IF;
    END IF;
    -- A migrating role that is not a superuser acts as pgmem_app through SET ROLE when it connects
    -- (pgmem's clients do that for a DSN of the owner): it must be a member.
    IF to_regrole('pgmem_app') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND rolsuper)
       AND NOT pg_has_role(current_user, 'pgmem_app', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT pgmem_app TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pgmem: % is not a member of pgmem_app and may not become one: GRANT pgmem_app TO %',
                current_user, current_user;
        END;
    END IF;
END $$"""

# What the library needs, granted when the role exists (EXECUTE on functions: PUBLIC has it by default,
# granted anyway in case a DBA revoked it from PUBLIC). MAINTAIN exists from PostgreSQL 17.
_GRANTS = """
DO $$
BEGIN
    IF to_regrole('pgmem_app') IS NULL THEN
        RETURN;
    END IF;
    GRANT USAGE ON SCHEMA pgmem TO pgmem_app;
    GRANT SELECT, INSERT, UPDATE, DELETE ON %(tables)s TO pgmem_app;
    GRANT SELECT, INSERT ON pgmem.embedding_models TO pgmem_app;
    GRANT SELECT ON pgmem.alembic_version TO pgmem_app;
    GRANT SELECT ON %(views)s TO pgmem_app;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA pgmem TO pgmem_app;
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem TO pgmem_app;
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE 'GRANT MAINTAIN ON %(tables)s, pgmem.embedding_models TO pgmem_app';
    END IF;
    ALTER DEFAULT PRIVILEGES IN SCHEMA pgmem GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO pgmem_app;
    ALTER DEFAULT PRIVILEGES IN SCHEMA pgmem GRANT USAGE, SELECT ON SEQUENCES TO pgmem_app;
END $$"""

# security_invoker exists from PostgreSQL 15. On 14 a view runs with its owner's rights; the owner is
# subject to the forced policies all the same (unless it is a superuser), and pgmem.namespace is the
# caller's setting, so the views still show one namespace there.
_VIEW_OPTIONS = """
DO $$
DECLARE
    v text;
BEGIN
    IF current_setting('server_version_num')::int < 150000 THEN
        RAISE NOTICE 'pgmem: PostgreSQL before 15 has no security_invoker views';
        RETURN;
    END IF;
    FOREACH v IN ARRAY ARRAY[%(views)s] LOOP
        EXECUTE format('ALTER VIEW %%s %(action)s', v);
    END LOOP;
END $$"""

_REVOKES = """
DO $$
BEGIN
    IF to_regrole('pgmem_app') IS NULL THEN
        RETURN;
    END IF;
    ALTER DEFAULT PRIVILEGES IN SCHEMA pgmem REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM pgmem_app;
    ALTER DEFAULT PRIVILEGES IN SCHEMA pgmem REVOKE USAGE, SELECT ON SEQUENCES FROM pgmem_app;
    REVOKE ALL ON ALL TABLES IN SCHEMA pgmem FROM pgmem_app;
    REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgmem FROM pgmem_app;
    REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgmem FROM pgmem_app;
    REVOKE ALL ON SCHEMA pgmem FROM pgmem_app;
END $$"""


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"pgmem.{name}" for name in names)


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(f"'pgmem.{name}'" for name in names)


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE pgmem.{table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE pgmem.{table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY pgmem_namespace ON pgmem.{table} USING ({_SCOPED}) WITH CHECK ({_SCOPED})")
        op.execute(f"CREATE POLICY pgmem_admin ON pgmem.{table} TO CURRENT_USER USING ({_ADMIN}) WITH CHECK ({_ADMIN})")
    op.execute(_VIEW_OPTIONS % {"views": _quoted(VIEWS), "action": "SET (security_invoker = true)"})
    op.execute(_CREATE_APP_ROLE)
    op.execute(_GRANTS % {"tables": _names(TABLES), "views": _names(VIEWS)})


def downgrade() -> None:
    # The role stays: roles are cluster-wide and another database may use it.
    op.execute(_REVOKES)
    op.execute(_VIEW_OPTIONS % {"views": _quoted(VIEWS), "action": "RESET (security_invoker)"})
    for table in TABLES:
        op.execute(f"DROP POLICY pgmem_admin ON pgmem.{table}")
        op.execute(f"DROP POLICY pgmem_namespace ON pgmem.{table}")
        op.execute(f"ALTER TABLE pgmem.{table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE pgmem.{table} DISABLE ROW LEVEL SECURITY")
