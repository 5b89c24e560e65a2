"""``pgmem.openmanus`` is :mod:`pgmem.integrations.openmanus` (the facade's home since the layout of 2026-11-24)."""

from pgmem.integrations.openmanus import *  # noqa: F403
from pgmem.integrations.openmanus import __all__ as __all__
