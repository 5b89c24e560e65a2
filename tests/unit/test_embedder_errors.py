"""An embedding provider that cannot start says why and what to do, as a typed error (issue 35, item 5):
``PGMEM_EMBEDDER=openai`` without a key raised openai's own error, outside pgmem's hierarchy."""

from __future__ import annotations

import pytest

from pgmem.embeddings import OpenAIEmbedder, default_embedder
from pgmem.errors import EmbeddingError, PgmemError
from pgmem.settings import get_settings


def test_openai_without_a_key_is_an_embedding_error_with_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EmbeddingError, match="set OPENAI_API_KEY or pass api_key=") as caught:
        OpenAIEmbedder()
    assert isinstance(caught.value, PgmemError) and caught.value.__cause__ is None
    assert "PGMEM_EMBEDDER=hashing" in str(caught.value)
    # The same through the settings, as `PGMEM_EMBEDDER=openai` configures it.
    monkeypatch.setenv("PGMEM_EMBEDDER", "openai")
    if hasattr(get_settings, "cache_clear"):
        get_settings.cache_clear()
    try:
        with pytest.raises(EmbeddingError, match="OPENAI_API_KEY"):
            default_embedder()
    finally:
        monkeypatch.delenv("PGMEM_EMBEDDER")
        if hasattr(get_settings, "cache_clear"):
            get_settings.cache_clear()


def test_openai_with_a_key_starts_without_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embedder = OpenAIEmbedder(api_key="sk-test-not-used", base_url="http://127.0.0.1:9")
    assert embedder.model == "text-embedding-3-small" and embedder.dimension == 1536
