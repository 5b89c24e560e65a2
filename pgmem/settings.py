"""Settings read from the environment (``PGMEM_*``), with pydantic-settings."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("pgmem", appauthor=False))


class Settings(BaseSettings):
    """Process-wide settings.

    ``PGMEM_DSN``: the PostgreSQL server to use; unset means the embedded server under ``PGMEM_HOME``.
    ``PGMEM_HOME``: where the embedded server keeps its data (default: the user's data directory).
    ``PGMEM_NAMESPACE``: the namespace of the default client.
    ``PGMEM_EMBEDDER``: the default embedding provider: ``hashing`` (offline, the default),
    ``openai`` (model ``PGMEM_OPENAI_EMBEDDING_MODEL``, dimension ``PGMEM_OPENAI_EMBEDDING_DIMENSION``,
    key and ``base_url`` from ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``) or
    ``sentence-transformers:<model>`` (the ``pgmem[local]`` extra).
    ``PGMEM_RETRIEVAL_LOG``: ``1`` records every search's hits in ``pgmem.retrieval_log`` (default off;
    a client's ``retrieval_log=`` overrides it). See docs/analytics.md.
    ``PGMEM_VECTOR_LOG_RETENTION``: seconds a change stays in ``pgmem.vector_log`` (default 3600) before a
    client's sweep purges it; a FAISS cache further behind than that reloads its memory in full.
    ``PGMEM_RETRIEVAL_LOG_RETENTION``: seconds a logged search stays in ``pgmem.retrieval_log`` before a
    sweep purges it (default unset: the sweep leaves the retrieval log alone).
    ``PGMEM_SWEEP_INTERVAL``: a client sweeps its namespace at most this often, in seconds (default 300).
    See ``client.retention`` and the README's "Retention".
    """

    model_config = SettingsConfigDict(env_prefix="PGMEM_", extra="ignore")

    dsn: str | None = None
    home: Path = Field(default_factory=_default_home)
    namespace: str = "default"
    pool_min_size: int = 1
    pool_max_size: int = 10
    embedder: str = "hashing"
    openai_embedding_model: str = "text-embedding-3-small"
    openai_embedding_dimension: int = 1536
    retrieval_log: bool = False
    vector_log_retention: float = Field(default=3600.0, ge=0, allow_inf_nan=False)
    retrieval_log_retention: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    sweep_interval: float = Field(default=300.0, ge=0, allow_inf_nan=False)


def get_settings() -> Settings:
    return Settings()
