"""Calls in flight per workspace, in this server process: the noisy-neighbour limit.

A workspace may have at most *limit* RPCs running at once in one process; one more is
refused at once with RESOURCE_EXHAUSTED (a QuotaFailure whose quota_id is
``max_concurrent_requests``) instead of queueing for the embedder and the connection
pool that every workspace shares. This is the "concurrency limit" of Netflix's
concurrency-limits and of Envoy's adaptive-concurrency filter in its simplest, fixed
form (Little's law: with the rate limit bounding arrivals, in-flight calls bound the
latency one tenant can add to another's). Each process limits on its own, as the rate
limit does.
"""

from __future__ import annotations

from collections.abc import Callable

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError

QUOTA_ID = "max_concurrent_requests"

Release = Callable[[], None]


class ConcurrencyLimiter:
    """Counts each workspace's calls in flight. *limit* 0 means unlimited."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self._limit = limit
        self._in_flight: dict[int, int] = {}

    def in_flight(self, workspace: Workspace) -> int:
        """Calls of *workspace* holding a slot now."""
        return self._in_flight.get(workspace.key, 0)

    def acquire(self, workspace: Workspace) -> Release:
        """Take one of the workspace's slots; call the returned function once when the call
        ends (a second call does nothing). Raises `QuotaExceededError` (quota_id
        ``max_concurrent_requests``, limit = the setting) when all are taken."""
        if self._limit <= 0:
            return _nothing
        held = self._in_flight.get(workspace.key, 0)
        if held >= self._limit:
            raise QuotaExceededError(
                f"workspace:{workspace.name}",
                f"{QUOTA_ID}: {held} calls of this workspace are already running on this server process "
                f"(limit {self._limit}); retry when one has finished",
                quota_id=QUOTA_ID,
                limit=self._limit,
            )
        self._in_flight[workspace.key] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            remaining = self._in_flight[workspace.key] - 1
            if remaining:
                self._in_flight[workspace.key] = remaining
            else:
                del self._in_flight[workspace.key]

        return release


def _nothing() -> None:
    return None
