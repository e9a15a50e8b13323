"""A background task that runs one cleaning pass every interval (expired tool outputs,
expired memories), logging counts and surviving errors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from memplane.server.background import cancel

_log = logging.getLogger(__name__)


@dataclass
class SweepStats:
    """Passes completed, items deleted and failed passes since start."""

    runs: int = 0
    deleted: int = 0
    failures: int = 0


class Sweeper:
    """Calls *sweep* (one pass; returns how many items it deleted) after
    *first_delay_seconds* (default 1 s, at most the interval) and then every
    *interval_seconds*. A failing pass is logged and counted; the next one retries.
    `start()` needs a running event loop; `start()` and `await stop()` are idempotent.
    *what* names the items in logs ("expired memories"); no content is ever logged.
    """

    def __init__(
        self,
        what: str,
        sweep: Callable[[], Awaitable[int]],
        *,
        interval_seconds: float,
        first_delay_seconds: float = 1.0,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be > 0, got {interval_seconds}")
        self._what = what
        self._sweep = sweep
        self._interval = interval_seconds
        self._first_delay = max(0.0, min(first_delay_seconds, interval_seconds))
        self._task: asyncio.Task[None] | None = None
        self.stats = SweepStats()

    @property
    def running(self) -> bool:
        """Whether the background task is alive."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the background task (no-op when running)."""
        if self.running:
            return
        name = f"memplane-sweep-{self._what.replace(' ', '-')}"
        self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def stop(self) -> None:
        """Cancel the background task and wait for it to end."""
        task, self._task = self._task, None
        await cancel(task)

    async def run_once(self) -> int:
        """One pass now; return the number deleted. Errors propagate."""
        return await self._sweep()

    async def _run(self) -> None:
        await asyncio.sleep(self._first_delay)
        while True:
            started = asyncio.get_running_loop().time()
            try:
                deleted = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # any failure: log it, keep the loop alive
                self.stats.failures += 1
                _log.exception("sweep of %s failed; retrying in %.1f s", self._what, self._interval)
            else:
                self.stats.runs += 1
                self.stats.deleted += deleted
                elapsed = asyncio.get_running_loop().time() - started
                if deleted:
                    _log.info("deleted %d %s in %.3f s", deleted, self._what, elapsed)
                else:
                    _log.debug("no %s (%.3f s)", self._what, elapsed)
            await asyncio.sleep(self._interval)
