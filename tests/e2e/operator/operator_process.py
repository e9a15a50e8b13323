"""The operator as a real process (`python -m memplane_operator`) for one namespace, started
and killed on demand — for the tests that kill it, restart it, or need a resync interval
other than the in-process operator's 1 s (a long one shows what is done at once and what
waits for the timer)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.e2e.operator.kubeobjects import eventually
from tests.fix_process import free_port

RESYNC_SECONDS = 1.0  # drift, usage and rotation checks in tests (60 s by default)
LONG_RESYNC_SECONDS = 600.0  # far past every wait of a test: what happens, happens without the timer


class OperatorProcess:
    """`python -m memplane_operator` for *namespace*, with the resync interval given."""

    def __init__(
        self,
        *,
        target: str,
        admin_key: str,
        namespace: str,
        kubeconfig: Path,
        log: Path,
        resync_seconds: float = RESYNC_SECONDS,
    ) -> None:
        self.health_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "MEMPLANE_OPERATOR_ADMIN_TARGET": target,
            "MEMPLANE_OPERATOR_ADMIN_KEY": admin_key,
            "MEMPLANE_OPERATOR_NAMESPACES": json.dumps([namespace]),
            "MEMPLANE_OPERATOR_RESYNC_SECONDS": str(resync_seconds),
            "MEMPLANE_OPERATOR_HEALTH_HOST": "127.0.0.1",
            "MEMPLANE_OPERATOR_HEALTH_PORT": str(self.health_port),
        }
        self.log = log
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, *, kubeconfig: Path | None = None) -> None:
        """Start it (with *kubeconfig* instead of the one given at construction, when set)."""
        env = {**self.env, "KUBECONFIG": str(kubeconfig)} if kubeconfig is not None else self.env
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memplane_operator", env=env, stdout=out, stderr=out
            )

    async def live(self) -> None:
        """Wait until its /healthz answers (kopf's watchers start right after)."""
        assert await eventually(lambda: _live(self.healthz), seconds=60, what="/healthz answers") == 200

    async def kill(self) -> None:
        """SIGKILL: no cleanup, no finished patch, no goodbye."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        assert await self.process.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()

    def healthz(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5) as reply:
            return int(reply.status)


async def _live(probe: Callable[[], int]) -> int | None:
    try:
        return await asyncio.to_thread(probe)
    except OSError:
        return None
