"""``pgmem.stores`` is :mod:`pgmem.integrations.chatdev` (ChatDev DevAll's memory stores)."""

from pgmem.integrations.chatdev import *  # noqa: F403
from pgmem.integrations.chatdev import __all__ as __all__
