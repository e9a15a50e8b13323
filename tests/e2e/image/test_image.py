"""The container image (Dockerfile, built by scripts/image/build.sh with Podman) run for real:
`memplane serve` as a non-root user on a read-only root filesystem with no writable home
and no runtime directory (only /tmp writable, mode 0777 like the chart's emptyDir), against
an external DSN, answers health SERVING and serves a workspace; the operator's entry point
and the chart's uninstall check are inside; no compiler or pip is."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2
from tests.e2e.image.podmantools import PODMAN, PODMAN_ENV, image, pod_tmp, podman
from tests.fix_process import free_port

__all__ = ["image"]  # the fixture

START_SECONDS = 180.0


@contextlib.asynccontextmanager
async def tcp_to_unix(socket_path: str) -> AsyncIterator[int]:
    """A loopback TCP port forwarding to a Unix socket (the embedded PostgreSQL listens on a
    socket only; a container on the host network reaches it here, as it would a database
    on the network)."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_unix_connection(socket_path)
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def test_the_image_serves_read_only_as_non_root_with_an_external_dsn(
    image: str, pg_dsn: str, admin_key: str, tmp_path: Path
) -> None:
    params = conninfo_to_dict(pg_dsn)
    socket_path = f"{params['host']}/.s.PGSQL.{params.get('port', 5432)}"
    port = free_port()
    async with tcp_to_unix(socket_path) as pg_port:
        dsn = f"postgresql://{params.get('user', 'postgres')}@127.0.0.1:{pg_port}/{params.get('dbname', 'postgres')}"
        name = f"memplane-test-{port}"
        run = [
            "run", "--rm", "--name", name, "--network", "host", *pod_tmp(tmp_path),
            "--user", "10001:10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "-e", f"MEMPLANE_DATABASE__DSN={dsn}", "-e", f"MEMPLANE_AUTH__ADMIN_KEY={admin_key}",
            "-e", "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE=false", "-e", "MEMPLANE_DATABASE__MIGRATE_ON_START=false",
            image, "serve", "--port", str(port),
        ]  # fmt: skip
        container = await asyncio.create_subprocess_exec(
            PODMAN, *run, env=PODMAN_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            async with AsyncMemplaneClient(f"127.0.0.1:{port}", admin_key, timeout=START_SECONDS) as admin:
                serving = asyncio.ensure_future(admin.check_health(wait_for_ready=True))
                exited = asyncio.ensure_future(container.wait())
                done, _ = await asyncio.wait({serving, exited}, return_when=asyncio.FIRST_COMPLETED)
                if exited in done:
                    out = await container.stdout.read() if container.stdout else b""
                    pytest.fail(f"the container exited with {container.returncode}:\n{out.decode()[-4000:]}")
                assert serving.result() == "SERVING"
                name_ws = f"img-{port}"
                await admin.create_workspace(name_ws)
                key = await admin.create_api_key(name_ws)
            async with AsyncMemplaneClient(f"127.0.0.1:{port}", key.api_key) as agent:
                await agent.add_memories([memory_pb2.MemoryInput(content="The image runs read-only")])
                hits = (await agent.search("how does the image run?")).hits
                assert [h.memory.content for h in hits] == ["The image runs read-only"]
        finally:
            podman("stop", "--time", "10", name, check=False)
            await container.wait()
    assert container.returncode == 0  # SIGTERM from podman stop: a graceful shutdown


def test_the_image_holds_the_operator_and_no_build_tools(image: str) -> None:
    config = podman("image", "inspect", image, "--format", "{{.Config.User}}").stdout.strip()
    assert config == "10001:10001"
    probe = podman(
        "run", "--rm", "--entrypoint", "/bin/sh", image, "-c",
        "id -u; for t in gcc cc make pip pip3 apt-get; do command -v $t >/dev/null && echo has-$t; done; true",
    )  # fmt: skip
    lines = probe.stdout.split()
    assert lines[0] == "10001"
    assert [t for t in lines[1:] if t != "has-apt-get"] == []  # the Debian base keeps apt, nothing builds
    operator = podman("run", "--rm", "--entrypoint", "memplane-operator", image, check=False)
    assert operator.returncode == 2
    assert "MEMPLANE_OPERATOR_ADMIN_KEY" in operator.stderr
    # The chart's pre-delete check (tests/e2e/chart runs its script against an API server).
    check = podman("run", "--rm", "--read-only", "--entrypoint", "memplane-uninstall-check", image, check=False)
    assert (check.returncode, check.stderr.strip()) == (2, "memplane: KUBERNETES_SERVICE_HOST is not set: not in a Pod")
