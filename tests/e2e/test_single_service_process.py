"""`memplane serve --services X` as the chart's Deployments run it (issue 26): a real
process per service (and one with all four) over the session's database, which serves
exactly X, logs the background jobs it started (only X's) and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.server.app import SERVICES
from tests.fix_process import SERVICES_START_SECONDS, free_port, wait_serving

FULL_NAMES = {
    "retrieval": "memplane.v1.RetrievalService",
    "writeback": "memplane.v1.WriteBackService",
    "compaction": "memplane.v1.CompactionService",
    "admin": "memplane.v1.AdminService",
}
# What each process logs as started ("services <names>: started <jobs>"); no LLM is
# configured, so a write-back process runs no extraction workers.
STARTED = {
    "retrieval": "invalidation listener, search counter",
    "writeback": (
        "invalidation listener, vector indexer, partition analyzer, retention sweeper, idempotency sweeper, "
        "job listener"
    ),
    "compaction": "invalidation listener, vector indexer, partition analyzer, blob cleaner",
    "admin": "invalidation listener",
    ",".join(SERVICES): (
        "invalidation listener, vector indexer, partition analyzer, search counter, retention sweeper, "
        "idempotency sweeper, job listener, blob cleaner"
    ),
}


@pytest.mark.parametrize("services", list(STARTED), ids=lambda s: s if "," not in s else "all")
async def test_a_service_process_serves_and_starts_only_its_own(
    services: str, pg_dsn: str, admin_key: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATA_DIR": str(tmp_path),
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "false",  # fix_database migrated it
    }
    env.pop("MEMPLANE_LLM__BASE_URL", None)  # no LLM
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "memplane", "serve", "--services", services, "--port", str(port)),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    target = f"127.0.0.1:{port}"
    try:
        await wait_serving(target, process, SERVICES_START_SECONDS)
        async with grpc.aio.insecure_channel(target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for name, full in FULL_NAMES.items():
                if name in services.split(","):
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=full), timeout=10)
                    assert reply.status == health_pb2.HealthCheckResponse.SERVING
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as raised:
                        await health.Check(health_pb2.HealthCheckRequest(service=full), timeout=10)
                    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        process.terminate()
        code = await asyncio.wait_for(process.wait(), 60)
    text = log.read_text(errors="replace")
    assert code == 0, text[-4000:]
    assert f"services {services.replace(',', ', ')}: started {STARTED[services]}\n" in text, text[-4000:]
