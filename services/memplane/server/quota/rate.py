"""`max_requests_per_second`: a token bucket per workspace, in this server process.

The bucket holds at most one second's worth of calls (capacity = rate) and refills
continuously at the rate, as Envoy's local rate limit and Kubernetes' client-go
`flowcontrol` token bucket do. Each process limits on its own: with N replicas of a
service a workspace may reach N times the rate (a shared limiter would cost a database
or Redis round trip on every call).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Admits or refuses one call of a workspace. *clock* returns seconds (monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[int, _Bucket] = {}

    def admit(self, workspace: Workspace) -> None:
        """Take one token from the workspace's bucket. Raises `QuotaExceededError`
        (quota_id ``max_requests_per_second``) when it is empty; a workspace without the
        quota (0) is always admitted."""
        rate = workspace.quotas.max_requests_per_second
        if rate <= 0:
            self._buckets.pop(workspace.key, None)
            return
        now = self._clock()
        bucket = self._buckets.get(workspace.key)
        if bucket is None:
            bucket = self._buckets[workspace.key] = _Bucket(tokens=float(rate), updated=now)
        bucket.tokens = min(float(rate), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / rate
            raise QuotaExceededError(
                f"workspace:{workspace.name}",
                f"max_requests_per_second: more than {rate} calls per second; retry in {wait:.3f} s",
                quota_id="max_requests_per_second",
                limit=rate,
            )
        bucket.tokens -= 1.0
