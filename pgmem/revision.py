"""The schema revision this version of pgmem needs.

``SCHEMA_REVISION`` is the alembic head of ``migrations/versions``: the revision a database must be at for
this code to use it. Connecting compares it with the database's ``pgmem.alembic_version`` in one query,
without importing alembic (which is loaded only when there is something to migrate). A new migration
changes it; a test checks that it equals alembic's head.
"""

from __future__ import annotations

from typing import Final

#: The alembic head this version of pgmem needs (``pgmem.alembic_version.version_num`` after ``pgmem migrate``).
SCHEMA_REVISION: Final = "0027"

__all__ = ["SCHEMA_REVISION", "is_known"]


def is_known(revision: str) -> bool:
    """Whether this pgmem knows the schema revision ``revision``. pgmem's revisions are numbered in order
    (``0001``, ``0002``, …), so one above :data:`SCHEMA_REVISION`, or any other name, was made by a newer
    release: this code must not touch that schema, and ``pgmem migrate`` from here cannot go back."""
    return revision.isdigit() and int(revision) <= int(SCHEMA_REVISION)


def too_new_message(current: str) -> str:
    """What a process of this pgmem says about a database a newer pgmem migrated to ``current``."""
    return (
        f"database schema is at revision {current}, which this pgmem (schema revision {SCHEMA_REVISION}) "
        "does not know: a newer pgmem migrated it; upgrade pgmem in this process (`pgmem migrate` cannot "
        "go back)"
    )
