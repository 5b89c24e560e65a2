"""Apply alembic migrations under an advisory lock, and check the schema revision at connect time."""

from __future__ import annotations

import functools
from typing import Any

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from pgmem.errors import translate
from pgmem.planning.resources import resource_path

#: pg_advisory_xact_lock key taken by every migration run ("pgmem" in ASCII).
MIGRATION_LOCK_KEY = 0x70676D656D


def engine_for(dsn: str | None) -> Engine:
    """A SQLAlchemy engine over psycopg 3 for ``dsn`` (any libpq DSN: URL or key=value)."""
    from pgmem.ops.server import default_dsn

    resolved = dsn or default_dsn()
    return create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(resolved), poolclass=NullPool)


def alembic_config(dsn: str | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(resource_path("migrations")))
    cfg.set_main_option("version_table_schema", "pgmem")
    if dsn:
        cfg.set_main_option("sqlalchemy.url", dsn.replace("%", "%%"))
    return cfg


@functools.cache
def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def upgrade(dsn: str) -> str:
    """Migrate the database at ``dsn`` to the newest revision; safe to call from many processes at once."""
    from alembic import command

    cfg = alembic_config()
    engine = engine_for(dsn)
    try:
        with translate():
            try:
                with engine.connect() as connection:
                    cfg.attributes["connection"] = connection
                    command.upgrade(cfg, "head")
                    connection.commit()
            except DBAPIError as exc:
                # SQLAlchemy wraps the driver's error; translate the driver's (e.g. ConnectionFailed).
                if isinstance(exc.orig, psycopg.Error):
                    raise exc.orig from exc
                raise
    finally:
        engine.dispose()
    return head_revision()
