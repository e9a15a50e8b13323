"""Optional TLS: a server with certificate files speaks TLS only, clients that trust its
CA search, every other client fails fast with UNAVAILABLE (never a hang), and the files
replaced on disk take effect on the next connection without a restart.

The CAs are made in the test (`tests.fix_tls`); the server is the session's App behind a
TLS listener of its own (in process), and once a real `memplane serve` configured by
MEMPLANE_GRPC__TLS_* with the CLI's --ca-file.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from memplane.server.api.server import RunningServer
from memplane.server.api.tls import TlsFiles
from memplane.server.app import App
from memplane.server.serving import serve
from memplane.v1 import memory_pb2
from tests.fix_process import SERVICES_START_SECONDS, free_port
from tests.fix_server import TestWorkspace
from tests.fix_tls import TestCA

CALL_SECONDS = 30.0  # a deadline that a hang would reach: failing calls must fail before it

StartTls = Callable[[TlsFiles], Awaitable[str]]


@pytest.fixture
async def tls_server(app: App) -> AsyncIterator[StartTls]:
    """`await start(files)` serves RetrievalService over TLS on a free port; returns the target."""
    running: list[RunningServer] = []

    async def start(files: TlsFiles) -> str:
        server = await serve(app, host="127.0.0.1", port=0, services=("retrieval",), tls=files)
        running.append(server)
        return f"127.0.0.1:{server.port}"

    yield start
    for server in running:
        await server.stop(0)


async def stored(workspace: TestWorkspace, text: str) -> str:
    """Add one memory through the session's plaintext server; returns its id."""
    [memory] = await workspace.client.add_memories(
        [memory_pb2.MemoryInput(content=text, scope=memory_pb2.Scope(user_id="alice"))]
    )
    return memory.id


async def search_ids(client: AsyncMemplaneClient, query: str) -> list[str]:
    reply = await client.search(query, top_k=5)
    return [hit.memory.id for hit in reply.hits]


async def test_tls_clients_with_the_ca_search_others_fail_and_new_files_apply_without_restart(
    tls_server: StartTls, workspace: TestWorkspace, tmp_path: Path
) -> None:
    memory_id = await stored(workspace, "Alice keeps her bicycle in the garden shed")
    first, second = TestCA("memplane test CA one"), TestCA("memplane test CA two")
    files = TlsFiles(tmp_path / "tls.crt", tmp_path / "tls.key")
    first.issue("memplane").write(files.cert_file, files.key_file)
    target = await tls_server(files)

    async with AsyncMemplaneClient(target, workspace.key, timeout=CALL_SECONDS, root_certificates=first.pem) as client:
        assert memory_id in await search_ids(client, "where is the bicycle?")

        # TLS with the system's roots: the self-signed CA is not among them.
        async with AsyncMemplaneClient(target, workspace.key, timeout=CALL_SECONDS, tls=True) as untrusting:
            with pytest.raises(UnavailableError, match=r"(?i)handshake|certificate"):
                await untrusting.search("where is the bicycle?")
        # Plaintext to a TLS port: the server refuses the connection, the call fails cleanly.
        async with AsyncMemplaneClient(target, workspace.key, timeout=CALL_SECONDS) as plaintext:
            with pytest.raises(UnavailableError):
                await plaintext.search("where is the bicycle?")

        # The files replaced by a certificate of another CA: the next connection uses it.
        second.issue("memplane").write(files.cert_file, files.key_file)
        async with AsyncMemplaneClient(
            target, workspace.key, timeout=CALL_SECONDS, root_certificates=second.pem
        ) as rotated:
            assert memory_id in await search_ids(rotated, "where is the bicycle?")
        async with AsyncMemplaneClient(
            f"https://{target}", workspace.key, timeout=CALL_SECONDS, root_certificates=first.pem
        ) as stale:
            with pytest.raises(UnavailableError, match=r"(?i)handshake|certificate"):
                await stale.search("where is the bicycle?")
        # The connection opened before the change keeps its session.
        assert memory_id in await search_ids(client, "where is the bicycle?")

    # A half-replaced pair (a certificate whose key is not readable) is not loaded: the
    # last good pair keeps serving.
    files.key_file.unlink()
    async with AsyncMemplaneClient(target, workspace.key, timeout=CALL_SECONDS, root_certificates=second.pem) as again:
        assert memory_id in await search_ids(again, "where is the bicycle?")


async def test_mutual_tls_refuses_a_client_without_a_certificate_of_the_client_ca(
    tls_server: StartTls, workspace: TestWorkspace, tmp_path: Path
) -> None:
    memory_id = await stored(workspace, "Alice's locker code is written in her notebook")
    server_ca, client_ca, stranger_ca = TestCA("server CA"), TestCA("client CA"), TestCA("stranger CA")
    files = TlsFiles(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "clients.pem")
    server_ca.issue("memplane").write(files.cert_file, files.key_file)
    files.client_ca_file.write_bytes(client_ca.pem)  # type: ignore[union-attr]
    target = await tls_server(files)

    agent = client_ca.issue("agent-1", server=False)
    async with AsyncMemplaneClient(
        target,
        workspace.key,
        timeout=CALL_SECONDS,
        root_certificates=server_ca.pem,
        client_certificate=(agent.cert, agent.key),
    ) as client:
        assert memory_id in await search_ids(client, "where is the locker code?")
    stranger = stranger_ca.issue("agent-2", server=False)
    for certificate in (None, (stranger.cert, stranger.key)):
        async with AsyncMemplaneClient(
            target,
            workspace.key,
            timeout=CALL_SECONDS,
            root_certificates=server_ca.pem,
            client_certificate=certificate,
        ) as refused:
            with pytest.raises(UnavailableError):
                await refused.search("where is the locker code?")


def test_a_target_scheme_decides_tls_and_contradictions_are_refused() -> None:
    with pytest.raises(ValueError, match="http://"):
        AsyncMemplaneClient("http://127.0.0.1:1", tls=True)
    with pytest.raises(ValueError, match="no address"):
        AsyncMemplaneClient("https://")


async def test_memplane_serve_with_tls_settings_and_the_cli_with_ca_file(
    pg_dsn: str, admin_key: str, workspace: TestWorkspace, tmp_path: Path
) -> None:
    await stored(workspace, "Alice parks her car on level three")
    ca = TestCA("memplane test CA")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    ca.issue("memplane").write(cert_file, key_file)
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    port = free_port()
    env = {
        **os.environ,
        "MEMPLANE_DATABASE__DSN": pg_dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
        "MEMPLANE_DATA_DIR": str(tmp_path),
        "MEMPLANE_GRPC__PORT": str(port),
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "false",
        "MEMPLANE_GRPC__TLS_CERT_FILE": str(cert_file),
        "MEMPLANE_GRPC__TLS_KEY_FILE": str(key_file),
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "memplane", "serve", "--services", "retrieval"),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    target = f"127.0.0.1:{port}"
    try:
        async with AsyncMemplaneClient(target, timeout=SERVICES_START_SECONDS, root_certificates=ca.pem) as probe:
            health = asyncio.ensure_future(probe.check_health(wait_for_ready=True))
            exited = asyncio.ensure_future(process.wait())
            done, _ = await asyncio.wait({health, exited}, return_when=asyncio.FIRST_COMPLETED)
            assert health in done, f"memplane serve exited with {process.returncode}:\n{log.read_text()[-3000:]}"
            exited.cancel()
            assert health.result() == "SERVING"
        cli = [sys.executable, "-m", "memplane", "search", "where does alice park?", "--target", target]
        cli_env = {**os.environ, "MEMPLANE_DATA_DIR": str(tmp_path), "MEMPLANE_API_KEY": workspace.key}
        ok = await asyncio.to_thread(
            subprocess.run, [*cli, "--ca-file", str(tmp_path / "ca.pem")], env=cli_env, capture_output=True, text=True
        )
        assert ok.returncode == 0, ok.stderr
        assert "Alice parks her car on level three" in ok.stdout
        plain = await asyncio.to_thread(subprocess.run, cli, env=cli_env, capture_output=True, text=True)
        assert plain.returncode == 1
        assert "UnavailableError" in plain.stderr
    finally:
        process.terminate()
        await process.wait()
