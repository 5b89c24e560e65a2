"""The schema revision this version of pgmem needs.

``SCHEMA_REVISION`` is the alembic head of ``migrations/versions``: the revision a database must be at for
this code to use it. Connecting compares it with the database's ``pgmem.alembic_version`` in one query,
without importing alembic (which is loaded only when there is something to migrate). A new migration
changes it; a test checks that it equals alembic's head.
"""

from __future__ import annotations

from typing import Final

#: The alembic head this version of pgmem needs (``pgmem.alembic_version.version_num`` after ``pgmem migrate``).
SCHEMA_REVISION: Final = "0007"

__all__ = ["SCHEMA_REVISION"]
