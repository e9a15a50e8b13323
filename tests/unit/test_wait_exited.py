"""`wait_exited` returns once a real process has exited — on a pidfd, and by polling its
PID where there is none — and not while it runs."""

from __future__ import annotations

import asyncio
import os

import pytest

from memplane.server.storage import embedded_supervisor
from memplane.server.storage.embedded_supervisor import wait_exited


async def _returns_once_killed() -> None:
    """A child that would run a minute: the wait is still pending while it runs (checked
    after 0.2 s, which cannot fail early), and returns once it is killed."""
    sleeper = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        waiting = asyncio.ensure_future(wait_exited(sleeper.pid))
        done, _ = await asyncio.wait({waiting}, timeout=0.2)
        assert not done, "returned while the process still ran"
        sleeper.kill()
        await sleeper.wait()  # reaped, as the postmaster's parent (init) reaps it
        async with asyncio.timeout(10):
            await waiting
    finally:
        if sleeper.returncode is None:
            sleeper.kill()
            await sleeper.wait()


async def test_a_pidfd_tells_when_the_process_exits() -> None:
    await _returns_once_killed()


async def test_without_pidfd_the_pid_is_polled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "pidfd_open")
    monkeypatch.setattr(embedded_supervisor, "POLL_SECONDS", 0.01)
    await _returns_once_killed()


async def test_a_process_already_gone_returns_at_once() -> None:
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    async with asyncio.timeout(10):
        await wait_exited(gone.pid)
