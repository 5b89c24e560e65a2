"""Integrations: each framework's familiar API over pgmem's clients (MetaGPT, OpenManus, ChatDev DevAll)."""
