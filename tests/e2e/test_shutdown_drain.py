"""SIGTERM with `grpc.drain_seconds` (what the chart sets so a rolling update fails no call): a
real `memplane serve` process goes NOT_SERVING at once, still answers RPCs during the drain
(kube-proxy may still send it new connections), then closes its listener and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from memplane.v1 import memory_pb2
from tests.fix_process import SERVICES_START_SECONDS, free_port, wait_serving

DRAIN_SECONDS = 300.0  # far longer than the checks below take, so they run inside it; a second SIGTERM ends it


async def _health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        return int(reply.status)


async def _read_until_not_serving(watch: Any) -> None:
    while (await watch.read()).status != health_pb2.HealthCheckResponse.NOT_SERVING:
        pass


async def test_a_draining_server_says_not_serving_yet_answers_then_exits_cleanly(
    pg_dsn: str, admin_key: str, tmp_path: Path
) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    env = {
        **os.environ,
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATA_DIR": str(tmp_path),
        "MEMPLANE_GRPC__PORT": str(port),
        "MEMPLANE_GRPC__DRAIN_SECONDS": str(DRAIN_SECONDS),
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "false",
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", "serve", env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        await wait_serving(target, process, SERVICES_START_SECONDS)
        async with AsyncMemplaneClient(target, admin_key) as admin:
            await admin.create_workspace("drain-ws")
            key = (await admin.create_api_key("drain-ws")).api_key
        async with AsyncMemplaneClient(target, key) as client:
            await client.add_memories([memory_pb2.MemoryInput(content="draining servers still answer")])
            async with grpc.aio.insecure_channel(target) as channel:
                watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
                await watch.read()  # the first reply (SERVING): the watch is in place
                process.send_signal(signal.SIGTERM)
                await _read_until_not_serving(watch)
            assert await _health(target) == health_pb2.HealthCheckResponse.NOT_SERVING
            hits = (await client.search("draining servers", top_k=1)).hits  # a new call, mid-drain
            assert hits[0].memory.content == "draining servers still answer"
            assert process.returncode is None
    except BaseException:
        process.kill()
        await process.wait()
        raise
    process.send_signal(signal.SIGTERM)  # the second: ends the drain
    assert await process.wait() == 0, log.read_text()[-3000:]  # the second SIGTERM cut the drain short
    with pytest.raises(UnavailableError):
        async with AsyncMemplaneClient(target, key, timeout=2) as late:
            await late.search("after exit", top_k=1)
