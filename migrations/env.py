"""Alembic environment for pgmem.

Migrations run in one transaction that first takes a transaction-level advisory lock, so any number of
processes may migrate the same database at once: the first applies the revisions, the others wait and
then find nothing to do. Online, the lock is polled (pgmem.ops.migrate.take_migration_lock) and the
transaction is the caller's: pgmem.ops.migrate.upgrade commits it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from pgmem.ops.migrate import MIGRATION_LOCK_KEY, engine_for, take_migration_lock
from pgmem.ops.schema import SCHEMA, metadata

config = context.config


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # Only pgmem's own schema is ours to compare. Alembic compares tables, not views, functions or
    # triggers: tests/migrations/test_database_code.py checks those against sql/.
    if type_ == "table" and getattr(obj, "schema", None) not in (SCHEMA, None):
        return False
    if type_ == "table" and name == "alembic_version":
        return False
    # Per-model HNSW indexes are created at run time when a model is first used (pgmem.vectors, client.items).
    if type_ == "index" and reflected and (name or "").startswith(("embeddings_hnsw_m", "item_vectors_hnsw_m")):
        return False
    return True


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        engine = engine_for(config.get_main_option("sqlalchemy.url") or None)
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
        engine.dispose()
    else:
        _run(connection)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    # Taken before alembic begins: the transaction is then the caller's (alembic's begin is a no-op).
    take_migration_lock(connection)
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table_schema=SCHEMA,
        include_schemas=True,
        include_object=_include_object,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        connection.execute(text("CREATE SCHEMA IF NOT EXISTS pgmem"))
        # Row-level security (revision 0004) is forced on the owner too: a data migration sees every
        # namespace through the owner's pgmem_admin policy.
        connection.execute(text("SELECT set_config('pgmem.admin', 'on', true)"))
        context.run_migrations()


def run_migrations_offline() -> None:
    """Write the SQL script of the migrations instead of running it (``pgmem migrate --sql``, for a DBA): the
    same transaction, lock and settings as online. A migration that would read the database to decide
    (0005, 0007) writes the decision into the script, for the server to make when it runs."""
    context.configure(
        dialect_name="postgresql",
        target_metadata=metadata,
        version_table_schema=SCHEMA,
        include_schemas=True,
        literal_binds=True,
        # Named parameters: no %-escaping of the SQL text (RAISE '... %' stays as the migration wrote it).
        dialect_opts={"paramstyle": "named"},
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.execute(f"SELECT pg_advisory_xact_lock({int(MIGRATION_LOCK_KEY)})")
        context.execute("CREATE SCHEMA IF NOT EXISTS pgmem")
        context.execute("SELECT set_config('pgmem.admin', 'on', true)")
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
