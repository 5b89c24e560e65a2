"""Differential tests against MetaGPT 0.8.2 (``metagpt`` on PyPI)."""
