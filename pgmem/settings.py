"""Settings read from the environment (``PGMEM_*``).

A plain frozen dataclass parsed from ``os.environ`` at each :func:`get_settings` call (a few microseconds).
It was a pydantic-settings model: that package (with python-dotenv) cost about 45 ms of CPU at every
``import pgmem``, a fifth of what pgmem adds to a cold start over raw psycopg (``benchmarks/startup.py``),
for a dozen scalar variables.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeAlias

from pgmem.errors import InvalidInput, redact

__all__ = ["Fraction", "Seconds", "Settings", "get_settings"]

#: A duration in seconds, finite and >= 0 (the annotation names the parser, see ``_PARSERS``).
Seconds: TypeAlias = float
#: A share, a number in [0, 1].
Fraction: TypeAlias = float

PREFIX = "PGMEM_"


def _default_home() -> Path:
    import platformdirs  # only when PGMEM_HOME is unset

    return Path(platformdirs.user_data_dir("pgmem", appauthor=False))


@dataclass(frozen=True)
class Settings:
    """Process-wide settings, each from ``PGMEM_<NAME>`` (the name in upper case; the variable's name is
    matched without regard to case, as before).

    ``PGMEM_DSN``: the PostgreSQL server to use; unset means the embedded server under ``PGMEM_HOME``.
    ``PGMEM_HOME``: where the embedded server keeps its data (default: the user's data directory).
    ``PGMEM_NAMESPACE``: the namespace of the default client.
    ``PGMEM_EMBEDDER``: the default embedding provider: ``hashing`` (offline, the default),
    ``openai`` (model ``PGMEM_OPENAI_EMBEDDING_MODEL``, dimension ``PGMEM_OPENAI_EMBEDDING_DIMENSION``,
    key and ``base_url`` from ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``) or
    ``sentence-transformers:<model>`` (the ``pgmem[local]`` extra; ``<model>`` a Hugging Face id or a local
    directory, ``sentence-transformers:<model>#<name>`` to register it under ``<name>``, e.g. the id of the
    model a directory holds: ``pgmem.embeddings.default_embedder``).
    ``PGMEM_RETRIEVAL_LOG``: ``1`` records every search's hits in ``pgmem.retrieval_log`` (default off;
    a client's ``retrieval_log=`` overrides it). See docs/analytics.md.
    ``PGMEM_VECTOR_LOG_RETENTION``: seconds a change stays in ``pgmem.vector_log`` (default 3600) before a
    client's sweep purges it; a FAISS cache further behind than that reloads its memory in full.
    ``PGMEM_RETRIEVAL_LOG_RETENTION``: seconds a logged search stays in ``pgmem.retrieval_log`` before a
    sweep purges it (default unset: the sweep leaves the retrieval log alone).
    ``PGMEM_RECALL_SAMPLE``: the share of vector, batch and hybrid searches whose recall is checked
    (``pgmem.recall_samples``, the view ``pgmem.search_recall``), 0 to 1 (default 0: off; a client's
    ``recall_sample=`` overrides it). ``PGMEM_RECALL_CHECK_INTERVAL``: seconds between two runs of a client's
    background checker (default 60); ``PGMEM_RECALL_RETENTION``: seconds a sample is kept (default 7 days).
    See docs/analytics.md.
    ``PGMEM_APP_ROLE``: the role (default ``pgmem_app``) a client acts as when its DSN logs in as a role
    that row-level security does not hold (a superuser, BYPASSRLS, or the tables' owner): every pooled
    connection runs ``SET ROLE`` to it once. See ``pgmem.security``.
    ``PGMEM_SWEEP_INTERVAL``: a client sweeps its namespace at most this often, in seconds (default 300).
    See ``client.retention`` and the README's "Retention".
    ``PGMEM_REPLICA_DSNS``: DSNs of streaming replicas that searches and analytics read from, separated by
    commas (a multi-host URL cannot be one of them); ``PGMEM_REPLICA_WAIT``: seconds a read that follows
    the client's write waits for a replica to replay it (default 1). See the README's "Read replicas".

    A value that does not parse raises :class:`pgmem.InvalidInput` naming the variable.
    """

    dsn: str | None = field(default=None, repr=False)  # it may hold a password
    _home: Path | None = field(default=None, repr=False)  # PGMEM_HOME, see home
    namespace: str = "default"
    pool_min_size: int = 1
    pool_max_size: int = 10
    embedder: str = "hashing"
    openai_embedding_model: str = "text-embedding-3-small"
    openai_embedding_dimension: int = 1536
    retrieval_log: bool = False
    vector_log_retention: Seconds = 3600.0
    retrieval_log_retention: Seconds | None = None
    recall_sample: Fraction = 0.0
    recall_check_interval: Seconds = 60.0
    recall_retention: Seconds = 604800.0
    sweep_interval: Seconds = 300.0
    replica_dsns: str | None = field(default=None, repr=False)  # they may hold passwords
    replica_wait: Seconds = 1.0
    app_role: str = "pgmem_app"

    def __repr__(self) -> str:
        # Written out (the dataclass's own is then not generated) to pass through redact(): a field may
        # hold a DSN with its password (``dsn`` itself is left out).
        shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in fields(self) if spec.repr)
        return redact(f"Settings({shown})")

    @property
    def home(self) -> Path:
        """``PGMEM_HOME``, else the user's data directory (platformdirs is imported only then: ~5 ms)."""
        return self._home if self._home is not None else _default_home()

    @property
    def replica_list(self) -> list[str]:
        """``PGMEM_REPLICA_DSNS`` as a list (empty when unset)."""
        return [dsn.strip() for dsn in (self.replica_dsns or "").split(",") if dsn.strip()]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings given by ``environ`` (default: ``os.environ``); unset variables keep their defaults."""
        env = os.environ if environ is None else environ
        given = {name.upper(): value for name, value in env.items() if name.upper().startswith(PREFIX)}
        values: dict[str, Any] = {}
        for spec in fields(cls):
            name = PREFIX + spec.name.strip("_").upper()
            if name not in given:
                continue
            parse = _PARSERS[str(spec.type)]
            try:
                values[spec.name] = parse(given[name])
            except ValueError as exc:
                raise InvalidInput(f"{name}={given[name]!r}: {exc}") from None
        return cls(**values)


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def _bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError("expected a boolean (1/0, true/false, yes/no, on/off)")


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _seconds(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("expected a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("expected a finite number of seconds >= 0")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("expected a number in [0, 1]") from None
    if not 0 <= value <= 1:  # NaN fails too
        raise ValueError("expected a number in [0, 1]")
    return value


def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda text: None if text.strip() == "" else parse(text)


# One parser per annotation used above (the annotations are strings: ``from __future__ import annotations``).
_PARSERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "str | None": _optional(str),
    "Path | None": _optional(Path),
    "int": _int,
    "bool": _bool,
    "Seconds": _seconds,
    "Fraction": _fraction,
    "Seconds | None": _optional(_seconds),
}


def get_settings() -> Settings:
    """The settings of the environment as it is now."""
    return Settings.from_env()
