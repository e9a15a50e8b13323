"""A token bucket per client address: sign-in attempts are limited so a key cannot be
guessed through the console faster than `rate_per_second` (after a `burst`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    """`allow(address)` takes one token of *address*'s bucket (*burst* tokens, refilled
    at *rate_per_second*); False when it is empty. At most *max_addresses* buckets are
    kept (the least recently used forgotten). *clock* in seconds (`time.monotonic`)."""

    def __init__(
        self,
        *,
        burst: int = 10,
        rate_per_second: float = 10 / 60.0,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst < 1 or rate_per_second <= 0:
            raise ValueError("burst must be >= 1 and rate_per_second > 0")
        self._burst = float(burst)
        self._rate = rate_per_second
        self._max = max_addresses
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)

    def allow(self, address: str) -> bool:
        """Take a token for *address*; False (take nothing) when none is left."""
        now = self._clock()
        tokens, at = self._buckets.pop(address, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        allowed = tokens >= 1.0
        self._buckets[address] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return allowed

    def retry_after(self, address: str) -> float:
        """Seconds until *address* has a token again (0 when it has one)."""
        now = self._clock()
        tokens, at = self._buckets.get(address, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        return max(0.0, (1.0 - tokens) / self._rate)
