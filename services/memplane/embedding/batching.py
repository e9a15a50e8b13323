"""Dynamic batching: concurrent embedding calls share one model call.

A local model embeds one batch at a time. Without batching, 32 concurrent searches
queue 32 single-text calls behind the model lock (bench/search_latency.py measured query
embedding p50 growing from 23 ms at concurrency 1 to ~400 ms at 32). Here the first
call runs at once; calls that arrive while it runs are coalesced into the next model
call (up to *max_batch* texts), as inference servers do (e.g. NVIDIA Triton's dynamic
batcher, without its queue delay: nothing waits when the model is idle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from memplane.embedding.base import Embedder

EmbedFn = Callable[[Sequence[str]], Awaitable[np.ndarray]]


class _Lane:
    """One queue of pending calls to one embedding function."""

    def __init__(self, fn: EmbedFn, max_batch: int) -> None:
        self._fn = fn
        self._max_batch = max_batch
        self._pending: list[tuple[list[str], asyncio.Future[np.ndarray]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def submit(self, texts: Sequence[str]) -> np.ndarray:
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._pending.append((list(texts), future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    def _next_batch(self) -> list[tuple[list[str], asyncio.Future[np.ndarray]]]:
        batch: list[tuple[list[str], asyncio.Future[np.ndarray]]] = []
        size = 0
        while self._pending and (not batch or size + len(self._pending[0][0]) <= self._max_batch):
            item = self._pending.pop(0)
            if item[1].done():  # the caller gave up (cancelled): skip its texts
                continue
            batch.append(item)
            size += len(item[0])
        return batch

    async def _drain(self) -> None:
        while self._pending:
            batch = self._next_batch()
            if not batch:
                continue
            try:
                vectors = await self._fn([text for texts, _ in batch for text in texts])
            except Exception as error:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            start = 0
            for texts, future in batch:
                if not future.done():
                    future.set_result(vectors[start : start + len(texts)])
                start += len(texts)


class BatchingEmbedder:
    """Wraps an `Embedder`: concurrent calls of the same role share model calls of up to
    *max_batch* texts. Results are identical to unbatched calls (rows are independent)."""

    def __init__(self, inner: Embedder, max_batch: int = 64) -> None:
        self._inner = inner
        self._queries = _Lane(inner.embed_queries, max_batch)
        self._documents = _Lane(inner.embed_documents, max_batch)

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        return await self._documents.submit(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        return await self._queries.submit(texts)
