"""The per-process token bucket of `max_requests_per_second`, on a controlled clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from memplane.domain.models import Quotas, Workspace
from memplane.errors import QuotaExceededError
from memplane.server.quota.rate import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _workspace(rate: int, key: int = 1) -> Workspace:
    return Workspace(
        key=key,
        name=f"w{key}",
        embedding_model="m",
        embedding_dimensions=3,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        quotas=Quotas(max_requests_per_second=rate),
    )


def test_a_burst_of_one_second_then_refill_at_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    ws = _workspace(4)
    for _ in range(4):
        limiter.admit(ws)
    with pytest.raises(QuotaExceededError) as caught:
        limiter.admit(ws)
    assert (caught.value.quota_id, caught.value.limit) == ("max_requests_per_second", 4)
    assert "retry in 0.250 s" in caught.value.description
    clock.now += 0.25  # one token back
    limiter.admit(ws)
    with pytest.raises(QuotaExceededError):
        limiter.admit(ws)
    clock.now += 60  # refills to the capacity, never beyond
    for _ in range(4):
        limiter.admit(ws)
    with pytest.raises(QuotaExceededError):
        limiter.admit(ws)


def test_workspaces_have_their_own_buckets_and_zero_is_unlimited() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    a, b = _workspace(1, key=1), _workspace(1, key=2)
    limiter.admit(a)
    limiter.admit(b)
    with pytest.raises(QuotaExceededError):
        limiter.admit(a)
    unlimited = replace(a, quotas=Quotas())
    for _ in range(1000):
        limiter.admit(unlimited)
