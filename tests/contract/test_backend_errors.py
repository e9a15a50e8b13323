"""The operator's reading of its backends' failures (`memplane_operator.backends.base.ErrorTable`)
on the failures themselves: the docker backend against real Podman (a container whose
command cannot start: a 5xx; an unknown container: a 4xx; a socket nothing listens on),
the e2b backend through the real `e2b` SDK against tests/fake_e2b.py answering the
statuses E2B's API answers (400, 429, 500, 503) or not answering at all. Each is read as
`BackendRefusedError` (4xx: only an edit helps) or `BackendUnavailableError` (retried),
its message naming the operation and the backend. The pod backend's are in
tests/e2e/k8s/test_pod_sandbox_errors.py (a real kube-apiserver)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import aiodocker
import pytest

from memplane.sandbox.docker import DockerSandboxes
from memplane.sandbox.e2b import E2BSandboxes
from memplane_operator.backends import BackendRefusedError, Backends, BackendUnavailableError
from tests.fake_e2b import FakeE2B
from tests.fix_podman import SANDBOX_IMAGE


def _workspace() -> str:
    return f"ws-{uuid.uuid4().hex[:8]}"


# -- docker on Podman ---------------------------------------------------------------
async def test_a_container_that_cannot_start_is_the_engine_failing(podman_socket: str) -> None:
    docker = aiodocker.Docker(url=podman_socket)
    prefix, workspace = f"t{uuid.uuid4().hex[:8]}-", _workspace()
    broken = await docker.containers.create(
        {"Image": SANDBOX_IMAGE, "Cmd": ["/no/such/program"]}, name=prefix + workspace
    )
    try:
        backend = DockerSandboxes(docker, SANDBOX_IMAGE, name_prefix=prefix)
        with pytest.raises(
            BackendUnavailableError, match=r"^ensure x: the Docker engine failed \(500\): .*no/such/program"
        ):
            await Backends().call("docker", "ensure x", backend.ensure(workspace))
    finally:
        await broken.delete(force=True)
        await docker.close()


async def test_a_4xx_of_the_engine_is_a_refusal(podman_socket: str) -> None:
    docker = aiodocker.Docker(url=podman_socket)
    try:
        with pytest.raises(BackendRefusedError, match=r"^inspect y: the Docker engine refused \(404\): .*no-such-"):
            await Backends().call("docker", "inspect y", docker.containers.get(f"no-such-{uuid.uuid4().hex[:8]}"))
    finally:
        await docker.close()


async def test_a_missing_image_is_a_refusal_naming_it(podman_socket: str) -> None:
    docker = aiodocker.Docker(url=podman_socket)
    try:
        backend = DockerSandboxes(docker, "localhost/no-such-image:none", name_prefix=f"t{uuid.uuid4().hex[:8]}-")
        with pytest.raises(
            BackendRefusedError, match=r"^ensure z: cannot create a sandbox from image 'localhost/no-such"
        ):
            await Backends().call("docker", "ensure z", backend.ensure(_workspace()))
    finally:
        await docker.close()


async def test_a_socket_nothing_listens_on_is_the_engine_unavailable(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("engine") / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:  # bound, never listening: refused
        bound.bind(str(path))
        docker = aiodocker.Docker(url=f"unix://{path}")
        try:
            backend = DockerSandboxes(docker, SANDBOX_IMAGE)
            with pytest.raises(BackendUnavailableError, match=r"^ensure w: the Docker engine failed: Cannot connect"):
                await Backends().call("docker", "ensure w", backend.ensure(_workspace()))
        finally:
            await docker.close()


# -- e2b through the SDK against the fake -------------------------------------------
@pytest.fixture
def cloud(fake_e2b: FakeE2B) -> Iterator[FakeE2B]:
    """The session's fake E2B, with no failure left queued after the test."""
    yield fake_e2b
    with fake_e2b.lock:
        fake_e2b.failures.clear()


@pytest.mark.parametrize(
    ("status", "message", "kind", "says"),
    [
        (400, "template 'no-such' not found", BackendRefusedError, r"E2B refused \(400\): 400: template 'no-such'"),
        (500, "cannot place the sandbox", BackendUnavailableError, r"E2B failed \(500\): 500: cannot place"),
        (429, "too many sandboxes", BackendUnavailableError, r"E2B is busy: 429: Rate limit exceeded"),
        (503, "overloaded", BackendUnavailableError, r"E2B is busy: 503: Service temporarily unavailable"),
    ],
)
async def test_e2b_answers_read_as_refused_or_unavailable(
    cloud: FakeE2B, status: int, message: str, kind: type[Exception], says: str
) -> None:
    # retries=0: the SDK would try a 429 or 503 again (3 times by default) and find it served
    backend = E2BSandboxes(template="no-such", connection={**cloud.connection(), "retries": 0})
    cloud.fail_next(status, message)  # the create's answer
    with pytest.raises(kind, match=rf"^ensure v: {says}"):
        await Backends().call("e2b", "ensure v", backend.ensure(_workspace()))
    assert not cloud.failures  # the create it was meant for was made


async def test_e2b_out_of_reach_is_unavailable(cloud: FakeE2B) -> None:
    with socket.socket() as bound:  # a port nothing listens on: connection refused
        bound.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{bound.getsockname()[1]}"
        backend = E2BSandboxes(connection={**cloud.connection(), "api_url": closed})
        with pytest.raises(BackendUnavailableError, match=r"^ensure u: E2B is unreachable: "):
            await Backends().call("e2b", "ensure u", backend.ensure(_workspace()))
