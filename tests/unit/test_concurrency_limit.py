"""The per-workspace limit of calls in flight (memplane.quota.concurrency)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError
from memplane.quota.concurrency import QUOTA_ID, ConcurrencyLimiter

_NOW = datetime(2026, 1, 1, tzinfo=UTC)
A = Workspace(key=1, name="a", embedding_model="m", embedding_dimensions=2, created_at=_NOW)
B = Workspace(key=2, name="b", embedding_model="m", embedding_dimensions=2, created_at=_NOW)


def test_a_workspace_past_its_limit_is_refused_and_others_are_not() -> None:
    limiter = ConcurrencyLimiter(2)
    held = [limiter.acquire(A), limiter.acquire(A)]
    with pytest.raises(QuotaExceededError) as refused:
        limiter.acquire(A)
    assert (refused.value.quota_id, refused.value.limit, refused.value.subject) == (QUOTA_ID, 2, "workspace:a")
    limiter.acquire(B)  # B's calls are counted apart
    held[0]()
    limiter.acquire(A)  # a released slot is free again
    assert limiter.in_flight(A) == 2


def test_releasing_twice_frees_one_slot() -> None:
    limiter = ConcurrencyLimiter(1)
    release = limiter.acquire(A)
    release()
    release()
    assert limiter.in_flight(A) == 0
    limiter.acquire(A)
    with pytest.raises(QuotaExceededError):
        limiter.acquire(A)


def test_zero_is_unlimited_and_a_negative_limit_is_refused() -> None:
    limiter = ConcurrencyLimiter(0)
    for _ in range(1000):
        limiter.acquire(A)
    with pytest.raises(ValueError, match="limit"):
        ConcurrencyLimiter(-1)
