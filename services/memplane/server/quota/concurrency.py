"""Calls in flight per workspace, in this server process: the noisy-neighbour limit.

A workspace may have at most *limit* RPCs running at once in one process, and at most
*queue* more waiting (first come, first served) for one of those slots; a call past both
is refused at once with RESOURCE_EXHAUSTED (a QuotaFailure whose quota_id is
``max_concurrent_requests``). A waiting call holds nothing shared — no connection, no
place in the embedder's queue — so one tenant's burst delays only itself, while a
single tenant's ordinary burst (a benchmark's 32 callers) is queued, not refused. This
is the "concurrency limit" of Netflix's concurrency-limits and of Envoy's
adaptive-concurrency filter in its simplest, fixed form, with the bounded waiting queue
of a bulkhead (Nygard, "Release It!", 2nd ed., ch. 5): with the rate limit bounding
arrivals, in-flight calls bound the latency one tenant can add to another's (Little's
law). Each process limits on its own, as the rate limit does. A waiting call that is
cancelled or passes its deadline leaves the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError

QUOTA_ID = "max_concurrent_requests"

Release = Callable[[], None]


@dataclass
class _Lane:
    running: int = 0
    waiting: deque[asyncio.Future[None]] = field(default_factory=deque)


class ConcurrencyLimiter:
    """Counts each workspace's calls in flight and waiting. *limit* 0 means unlimited;
    *queue* is how many calls may wait for a slot (0: refuse as soon as all run)."""

    def __init__(self, limit: int, queue: int = 0) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        if queue < 0:
            raise ValueError(f"queue must be >= 0, got {queue}")
        self._limit = limit
        self._queue = queue
        self._lanes: dict[int, _Lane] = {}

    def in_flight(self, workspace: Workspace) -> int:
        """Calls of *workspace* holding a slot now."""
        lane = self._lanes.get(workspace.key)
        return lane.running if lane else 0

    def waiting(self, workspace: Workspace) -> int:
        """Calls of *workspace* waiting for a slot now."""
        lane = self._lanes.get(workspace.key)
        return len(lane.waiting) if lane else 0

    async def acquire(self, workspace: Workspace) -> Release:
        """Take one of the workspace's slots, waiting in line for one if all are taken and
        the line is shorter than *queue*; call the returned function once when the call
        ends (a second call does nothing). Raises `QuotaExceededError` (quota_id
        ``max_concurrent_requests``, limit = the running limit) when the line is full,
        and `asyncio.CancelledError` if the caller is cancelled while waiting."""
        if self._limit <= 0:
            return _nothing
        lane = self._lanes.setdefault(workspace.key, _Lane())
        if lane.running < self._limit and not lane.waiting:
            lane.running += 1
        elif len(lane.waiting) < self._queue:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lane.waiting.append(turn)
            try:
                await turn  # resolved by a release, which hands its slot over
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # handed a slot in the same tick: give it on
                    self._release(workspace.key)
                else:
                    if turn in lane.waiting:  # a release may have dropped it already
                        lane.waiting.remove(turn)
                    self._drop_if_idle(workspace.key)
                raise
        else:
            raise QuotaExceededError(
                f"workspace:{workspace.name}",
                f"{QUOTA_ID}: {lane.running} calls of this workspace are running on this server process "
                f"and {len(lane.waiting)} are waiting (limit {self._limit}, queue {self._queue}); "
                "back off and retry",
                quota_id=QUOTA_ID,
                limit=self._limit,
            )
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release(workspace.key)

        return release

    def _release(self, key: int) -> None:
        lane = self._lanes[key]
        while lane.waiting:
            turn = lane.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot passes to the next in line: running stays
                return
        lane.running -= 1
        self._drop_if_idle(key)

    def _drop_if_idle(self, key: int) -> None:
        lane = self._lanes.get(key)
        if lane is not None and lane.running == 0 and not lane.waiting:
            del self._lanes[key]


def _nothing() -> None:
    return None
