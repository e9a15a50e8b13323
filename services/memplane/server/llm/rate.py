"""A per-workspace rate limit on LLM calls: a token bucket per workspace, in this process.

The bucket holds `burst` calls and refills at `requests_per_minute / 60` per second (the
token bucket of Envoy's local rate limit and client-go's `flowcontrol`). A call over the
rate WAITS for its token rather than failing: LLM calls run in extraction jobs and
session summaries, where a short wait is what the caller wants; a wait longer than
`max_wait_seconds` is refused with `QuotaExceededError` (RESOURCE_EXHAUSTED at the gRPC
edge, quota_id ``llm_requests_per_minute``), and an extraction job so refused is retried
later. Tokens are reserved in arrival order, so waiters are served first come, first
served. Each server process limits on its own (as `quota.rate`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError


@dataclass
class _Bucket:
    tokens: float
    updated: float


class LLMRateLimiter:
    """Admits LLM calls per workspace. *requests_per_minute* 0 means unlimited;
    *workspace_limits* overrides it by workspace name. *clock* (monotonic seconds) and
    *sleep* are injectable so tests control time."""

    def __init__(
        self,
        requests_per_minute: int,
        *,
        workspace_limits: Mapping[str, int] | None = None,
        burst: int = 1,
        max_wait_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._default = requests_per_minute
        self._limits = dict(workspace_limits or {})
        self._burst = max(1, burst)
        self._max_wait = max_wait_seconds
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[int, _Bucket] = {}

    def limit_for(self, workspace: Workspace) -> int:
        """Calls per minute allowed to *workspace* (0: unlimited)."""
        return self._limits.get(workspace.name, self._default)

    async def acquire(self, workspace: Workspace) -> float:
        """Take one token for *workspace*, waiting for it if the bucket is empty; return
        the seconds waited. Raises `QuotaExceededError` when the wait would pass
        `max_wait_seconds` (nothing is taken then)."""
        per_minute = self.limit_for(workspace)
        if per_minute <= 0:
            return 0.0
        rate = per_minute / 60.0
        now = self._clock()
        bucket = self._buckets.get(workspace.key)
        if bucket is None:
            bucket = self._buckets[workspace.key] = _Bucket(tokens=float(self._burst), updated=now)
        bucket.tokens = min(float(self._burst), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        wait = max(0.0, (1.0 - bucket.tokens) / rate)
        if wait > self._max_wait:
            raise QuotaExceededError(
                f"workspace:{workspace.name}",
                f"llm_requests_per_minute: more than {per_minute} LLM calls per minute; retry in {wait:.1f} s",
                quota_id="llm_requests_per_minute",
                limit=per_minute,
            )
        bucket.tokens -= 1.0  # reserved now (may go negative): later callers wait behind this one
        if wait > 0:
            await self._sleep(wait)
        return wait
