"""``pgmem.metagpt`` is :mod:`pgmem.integrations.metagpt` (the facade's home since the layout of 2026-11-24)."""

from pgmem.integrations.metagpt import *  # noqa: F403
from pgmem.integrations.metagpt import __all__ as __all__
