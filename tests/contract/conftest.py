"""The sandbox backends under the contract suite: one factory each. A new backend joins
the suite by adding its factory to `BACKENDS`; the factory
yields a ready backend and cleans up what it started (session fixtures it needs, e.g.
`podman_socket`, through *request*)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import aiodocker
import pytest

from memplane.sandbox import LocalSandboxes, SandboxBackend, SandboxHandle, SandboxNotFoundError
from memplane.sandbox.base import ExecResult
from memplane.sandbox.docker import DockerSandboxes
from memplane.sandbox.e2b import METADATA_KEY, E2BSandboxes
from memplane.sandbox.tarexec import TarExecIO
from tests.fake_e2b import FakeE2B
from tests.fix_podman import SANDBOX_IMAGE, podman_socket

__all__ = ["podman_socket"]  # the session fixture, visible to the tests here

BackendFactory = Callable[[Path, pytest.FixtureRequest], AbstractAsyncContextManager[SandboxBackend]]


class ExecDerivedLocal(LocalSandboxes):
    """The local backend with symlink resolution, listing and deleting left to the base
    class's defaults derived from `_exec` (`realpath -m`, `find -printf`, `rm -rf`):
    what a remote backend (docker, pod, e2b) inherits, run here against the host's
    GNU tools."""

    _realpath = SandboxBackend._realpath
    _list = SandboxBackend._list
    _delete = SandboxBackend._delete


@asynccontextmanager
async def _local(tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[SandboxBackend]:
    yield LocalSandboxes(tmp / "sandboxes")


@asynccontextmanager
async def _exec_derived(tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[SandboxBackend]:
    yield ExecDerivedLocal(tmp / "sandboxes")


@asynccontextmanager
async def _docker(tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[SandboxBackend]:
    """Containers over Podman's Docker API (tests/fix_podman.py), removed at the end."""
    run = uuid.uuid4().hex[:12]
    docker = aiodocker.Docker(url=request.getfixturevalue("podman_socket"))
    try:
        yield DockerSandboxes(docker, SANDBOX_IMAGE, name_prefix=f"t{run}-", labels={TEST_LABEL: run})
    finally:
        for container in await docker.containers.list(all=True, filters={"label": [f"{TEST_LABEL}={run}"]}):
            await container.delete(force=True)
        await docker.close()


class TarOverDockerExec(TarExecIO, DockerSandboxes):
    """The pod backend's file I/O and exec code (`memplane.sandbox.tarexec`: tar over an
    exec stream, the `cd`/`timeout` wrapper) on a Podman container: the container's
    lifecycle is the docker backend's, and `_stream` — what `PodSandboxes` sends over
    the Kubernetes exec websocket — runs the same argv and stdin through a Docker API
    exec (stdin closed by half-closing the hijacked connection, as v5's close does)."""

    async def _stream(self, handle: SandboxHandle, argv: list[str], stdin: bytes | None) -> ExecResult:
        try:
            execution = await self._container(handle).exec(cmd=argv, stdout=True, stderr=True, stdin=stdin is not None)
        except aiodocker.DockerError as exc:
            if exc.status in (404, 409):
                raise SandboxNotFoundError(handle.workspace) from None
            raise
        out, err = bytearray(), bytearray()
        async with execution.start(detach=False) as stream:
            if stdin is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):  # it exited without reading
                    await stream.write_in(stdin)
                    stream._resp.connection.transport.write_eof()  # type: ignore[union-attr]
            while (message := await stream.read_out()) is not None:
                (out if message.stream == 1 else err).extend(message.data)
        code = (await execution.inspect())["ExitCode"]
        return ExecResult(int(code if code is not None else -1), bytes(out), bytes(err))


@asynccontextmanager
async def _pod_io(tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[SandboxBackend]:
    """`TarOverDockerExec` on Podman: the pod backend's I/O half (its lifecycle is
    tests/e2e/k8s/test_pod_sandbox.py's, against a real API server)."""
    async with _docker(tmp, request) as docker_backend:
        assert isinstance(docker_backend, DockerSandboxes)
        backend = TarOverDockerExec.__new__(TarOverDockerExec)
        backend.__dict__.update(docker_backend.__dict__)
        yield backend


@pytest.fixture(scope="session")
def fake_e2b() -> Iterator[FakeE2B]:
    """E2B's control plane and envd on loopback (tests/fake_e2b.py), for the session."""
    with FakeE2B() as cloud:
        yield cloud


@asynccontextmanager
async def _e2b(tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[SandboxBackend]:
    """The real `e2b` SDK against the fake E2B; this test's sandboxes killed at the end."""
    cloud: FakeE2B = request.getfixturevalue("fake_e2b")
    run = uuid.uuid4().hex[:12]
    backend = E2BSandboxes(connection=cloud.connection(), metadata={TEST_LABEL: run})
    try:
        yield backend
    finally:
        for box in [b for b in list(cloud.sandboxes.values()) if b.metadata.get(TEST_LABEL) == run]:
            await backend.destroy(SandboxHandle("e2b", box.metadata[METADATA_KEY], box.sandbox_id, "/"))


BACKENDS: dict[str, BackendFactory] = {
    "local": _local,
    "exec-derived": _exec_derived,
    "docker": _docker,
    "e2b": _e2b,
    "pod-io": _pod_io,
}
TEST_LABEL = "memplane.io/test-run"


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SandboxBackend]:
    """Each backend of `BACKENDS` in turn."""
    async with BACKENDS[request.param](tmp_path, request) as ready:
        yield ready


@pytest.fixture
def workspace() -> str:
    """A fresh workspace name."""
    return f"ws-{uuid.uuid4().hex[:12]}"
