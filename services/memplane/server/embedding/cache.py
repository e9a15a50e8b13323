"""An LRU cache of embeddings keyed by (role, SHA-256 of the text), in process memory."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from memplane.server.embedding.base import Embedder


class CachedEmbedder:
    """Wraps an `Embedder`; identical texts are embedded once while they stay among the
    *capacity* most recently used (capacity 0 disables the cache). Only cache misses are
    sent to the model, in one call."""

    def __init__(self, inner: Embedder, capacity: int) -> None:
        self._inner = inner
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    def head(self, text: str, *, query: bool) -> str:
        return self._inner.head(text, query=query)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._cached("d", texts, self._inner.embed_documents)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._cached("q", texts, self._inner.embed_queries)

    async def _cached(
        self, role: str, texts: Sequence[str], compute: Callable[[Sequence[str]], Awaitable[np.ndarray]]
    ) -> np.ndarray:
        if self._capacity == 0:
            return await compute(texts)
        keys = [(role, hashlib.sha256(t.encode()).digest()) for t in texts]
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        missing: dict[tuple[str, bytes], list[int]] = {}
        for i, key in enumerate(keys):
            hit = self._entries.get(key)
            if hit is None:
                missing.setdefault(key, []).append(i)
            else:
                self._entries.move_to_end(key)
                out[i] = hit
                self.hits += 1
        if missing:
            self.misses += len(missing)
            order = list(missing)
            vectors = await compute([texts[missing[k][0]] for k in order])
            for key, vector in zip(order, vectors, strict=True):
                for i in missing[key]:
                    out[i] = vector
                self._entries[key] = vector
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return out
