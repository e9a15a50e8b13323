"""A real `memplane serve` process (registered as a plugin: ``-p tests.fix_process``):
the services as a cluster runs them — their own process, a loopback port, the session's
database and admin key — for the tiers that need a process of their own (the operator,
metrics)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICES_START_SECONDS = 180.0  # the embedding model loads on 2 busy cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_serving(target: str, process: asyncio.subprocess.Process, seconds: float) -> None:
    """Wait until *target* answers grpc.health.v1 SERVING (gRPC's own wait_for_ready, no
    polling sleeps). Raises `RuntimeError` if *process* exits first, `TimeoutError` after *seconds*."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        check = asyncio.ensure_future(stub.Check(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=seconds))
        exited = asyncio.ensure_future(process.wait())
        done, _ = await asyncio.wait({check, exited}, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            check.cancel()
            raise RuntimeError(f"memplane serve exited with {process.returncode} before serving")
        exited.cancel()
        reply = check.result()
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            raise RuntimeError(f"memplane serve reports {reply.status}")


@dataclass(frozen=True)
class Services:
    """A `memplane serve` process: its target and log file."""

    target: str
    log: Path
    process: asyncio.subprocess.Process
    metrics_port: int


@pytest.fixture(scope="session")
async def services(pg_dsn: str, admin_key: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Services]:
    """Every memplane service in one real process on a free loopback port, over the session's
    database, with the session's admin key, migrating nothing (the Job's way) and serving
    Prometheus metrics on `Services.metrics_port`; stopped by SIGTERM at the end."""
    data_dir = tmp_path_factory.mktemp("services")
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATA_DIR": str(data_dir),
        "MEMPLANE_GRPC__PORT": str(port),
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "false",  # fix_database migrated it
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(metrics_port),
    }
    log = data_dir / "serve.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", "serve", env=env, stdout=out, stderr=subprocess.STDOUT
        )
    target = f"127.0.0.1:{port}"
    try:
        await wait_serving(target, process, SERVICES_START_SECONDS)
    except (RuntimeError, TimeoutError) as error:
        process.kill()
        await process.wait()
        pytest.fail(f"{error}\n{log.read_text(errors='replace')[-4000:]}", pytrace=False)
    yield Services(target=target, log=log, process=process, metrics_port=metrics_port)
    process.terminate()
    await process.wait()
