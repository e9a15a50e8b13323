"""A `memplane serve` process killed and started again on the same port: a client made in
the same process after the restart is SERVING within RECONNECT_BOUND seconds of the new
server's "memplane listening on" line, though a client that lived through the outage kept
reconnecting (its channel's connection backoff grown to seconds).

Before the SDK's channel options (`memplane.client.channels`), the new client shared the
old one's subchannel from gRPC's process-wide subchannel pool, and with it that
subchannel's backoff: UNAVAILABLE "Connection refused" for seconds after the server was
back. Measured from the log line itself (read from the server's stdout as it is written),
no sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from memplane.client import AsyncMemplaneClient
from tests.fix_process import SERVICES_START_SECONDS, free_port

RECONNECT_BOUND = 0.5  # seconds from "listening" to SERVING (issue 28)
OUTAGE_SECONDS = 20.0  # how long the server stays dead: the outage of issue 28, not a wait for anything
LISTENING = b"memplane listening on"


@asynccontextmanager
async def _server(pg_dsn: str, admin_key: str, data_dir: Path, port: int) -> AsyncIterator[float]:
    """`memplane serve` on *port* over *pg_dsn*; yields the monotonic time its "listening"
    line was read (its output is drained to serve-<port>.log after); SIGKILLed on exit."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "MEMPLANE_DATABASE__DSN"},
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "true",  # nothing pending: fix_database migrated it
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATA_DIR": str(data_dir),
        "MEMPLANE_GRPC__PORT": str(port),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memplane", "serve", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdout is not None
    seen: list[bytes] = []
    log = data_dir / f"serve-{port}.log"

    async def drain() -> None:
        assert process.stdout is not None
        with log.open("ab") as out:
            out.writelines(seen)
            async for line in process.stdout:
                out.write(line)

    drainer: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(SERVICES_START_SECONDS):
            async for line in process.stdout:
                seen.append(line)
                if LISTENING in line:
                    break
        listening = time.monotonic()
        output = b"".join(seen).decode(errors="replace")[-4000:]
        assert any(LISTENING in line for line in seen), f"memplane serve exited with {process.returncode}:\n{output}"
        drainer = asyncio.ensure_future(drain())
        yield listening
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        if drainer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await drainer


async def test_a_new_client_is_serving_at_once_after_a_server_restart(
    pg_dsn: str, admin_key: str, tmp_path: Path
) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    survivor = AsyncMemplaneClient(target, admin_key, timeout=SERVICES_START_SECONDS)
    try:
        async with _server(pg_dsn, admin_key, tmp_path, port):
            assert await survivor.check_health() == "SERVING"
        # The outage: the server is dead (killed, waited for) while the surviving client keeps
        # asking, so its channel reconnects and backs off for as long as the restart takes.
        waiting = asyncio.ensure_future(survivor.check_health(wait_for_ready=True))
        await asyncio.sleep(OUTAGE_SECONDS)
        async with _server(pg_dsn, admin_key, tmp_path, port) as listening:
            async with AsyncMemplaneClient(target, admin_key, timeout=60) as fresh:
                status = await fresh.check_health(wait_for_ready=True)
                fresh_seconds = time.monotonic() - listening
            survivor_status = await waiting
            survivor_seconds = time.monotonic() - listening
        print(f"new client SERVING {fresh_seconds:.3f} s after listening; surviving one {survivor_seconds:.3f} s")
        assert status == "SERVING"
        assert survivor_status == "SERVING"
        assert fresh_seconds <= RECONNECT_BOUND, f"new client SERVING {fresh_seconds:.3f} s after listening"
    finally:
        await survivor.close()
