"""A `memplane serve` stop always ends within the documented bound (docs/operations/
failure-behaviour.md#stopping: drain_seconds + grace_period + close_seconds of SIGTERM),
whatever is in flight, on a machine whose cores are busy.

The server runs on the embedded default (so the close stops a PostgreSQL too), its
retention sweeper every half second. In flight at SIGTERM: one AddMemories of whole 32 KiB
texts (`embedding.max_input_tokens` 0: each model call embeds every window of one text,
seconds of uninterruptible native code on a loaded core), searches of four other
workspaces queued behind it on the model, and two processes this test starts burning
both cores. That the write is running, not merely sent, is seen from the server itself:
one call per workspace at a time (`quota.max_concurrent_requests_per_workspace` 1, no
queue), so a second call of its workspace is RESOURCE_EXHAUSTED exactly while it runs.

Before the bounded stop, the process waited for the model call under way and the ones
queued behind it (asyncio.run's end joins the worker threads without a bound)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import MemplaneError, NotFoundError, QuotaExceededError
from tests.faults.conftest import ServerProcess
from tests.fix_server import random_workspace_name
from tests.support import mem

GRACE_SECONDS = 2.0
CLOSE_SECONDS = 4.0  # the default grpc.close_seconds
BOUND_SECONDS = GRACE_SECONDS + CLOSE_SECONDS  # drain_seconds 0
EXIT_SLACK_SECONDS = 3.0  # the interpreter's own exit after the last step, on two burning cores
TEXTS = 16
SEARCHERS = 4


def _long_text(seed: int) -> str:
    """About 32 KiB of distinct English words (no two texts alike: nothing comes from the cache)."""
    words = [f"ledger{seed}entry{i} settled against account {i * 7919 % 10007}" for i in range(700)]
    return " ".join(words)[: 32 * 1024 - 64]


@contextlib.contextmanager
def _burning_cores(count: int) -> Iterator[None]:
    """*count* processes spinning on a core each, until the block ends."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


async def _workspace_client(admin: AsyncMemplaneClient, target: str) -> AsyncMemplaneClient:
    name = random_workspace_name()
    await admin.create_workspace(name)
    key = (await admin.create_api_key(name)).api_key
    return AsyncMemplaneClient(target, key, timeout=300.0, retry_reads=False)


async def _write(client: AsyncMemplaneClient) -> None:
    """The long AddMemories, sent again while `_until_running`'s probe holds the slot."""
    while True:
        with contextlib.suppress(QuotaExceededError):
            await client.add_memories([mem(_long_text(i)) for i in range(TEXTS)])
            return


async def _until_running(client: AsyncMemplaneClient, write: asyncio.Task[None]) -> None:
    """Return once the workspace's one call slot is taken by the write: a probe of the same
    workspace (calls one at a time) is refused for it."""
    while not write.done():
        try:
            await client.get_memory("00000000-0000-0000-0000-000000000000")
        except QuotaExceededError:
            return
        except NotFoundError:
            continue
    raise AssertionError(f"the write ended before the stop: {write.exception() if not write.cancelled() else None}")


async def _search_forever(client: AsyncMemplaneClient, seed: int) -> None:
    for i in range(10**6):
        with contextlib.suppress(QuotaExceededError):
            await client.search(f"which ledger entry {seed}-{i} was settled", top_k=3)


async def test_a_stop_with_calls_embeddings_and_jobs_in_flight_ends_within_the_bound(
    serve: Callable[..., Awaitable[ServerProcess]], admin_key: str
) -> None:
    server = await serve(
        None,
        MEMPLANE_GRPC__GRACE_PERIOD=str(GRACE_SECONDS),
        MEMPLANE_GRPC__CLOSE_SECONDS=str(CLOSE_SECONDS),
        MEMPLANE_EMBEDDING__MAX_INPUT_TOKENS="0",
        MEMPLANE_RETENTION__SWEEP_INTERVAL_SECONDS="0.5",
        MEMPLANE_QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE="1",
        MEMPLANE_QUOTA__MAX_QUEUED_REQUESTS_PER_WORKSPACE="0",
    )
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        writer = await _workspace_client(admin, server.target)
        searchers = [await _workspace_client(admin, server.target) for _ in range(SEARCHERS)]
    calls: list[asyncio.Future[None]] = []
    try:
        with _burning_cores(2):
            write = asyncio.ensure_future(_write(writer))
            calls.append(write)
            calls += [asyncio.ensure_future(_search_forever(c, n)) for n, c in enumerate(searchers)]
            await _until_running(writer, write)
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(server.process.wait(), BOUND_SECONDS + EXIT_SLACK_SECONDS)
            except TimeoutError:
                pytest.fail(
                    f"memplane serve still running {BOUND_SECONDS + EXIT_SLACK_SECONDS:.0f} s after SIGTERM\n"
                    + server.log.read_text(errors="replace")[-3000:],
                    pytrace=False,
                )
            took = time.monotonic() - started
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        for client in [writer, *searchers]:
            await client.close()
    log = server.log.read_text(errors="replace")
    print(f"stopped in {took:.1f} s (bound {BOUND_SECONDS:.0f} s)")
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "stopped in" in log  # stop_serving ran to its end, whatever it abandoned
    assert write.done()
    with contextlib.suppress(asyncio.CancelledError):
        assert write.cancelled() or isinstance(write.exception(), MemplaneError)
