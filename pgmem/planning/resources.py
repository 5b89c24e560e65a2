"""Where the packaged ``sql/`` and ``migrations/`` folders are.

In a wheel they live in ``pgmem/_resources``; in a source checkout (editable install) at the repository
root beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # the pgmem package


def resource_path(name: str) -> Path:
    """Return the path of a packaged resource folder or file (``sql``, ``migrations``, ``alembic.ini``)."""
    for candidate in (_PACKAGE / "_resources" / name, _PACKAGE.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"pgmem resource {name!r} is missing from this installation")
