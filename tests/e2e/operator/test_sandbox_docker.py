"""SandboxClass type docker end to end (tests/e2e/operator/sandbox_cases.py): `kubectl
apply` of a SandboxClass and a MemoryWorkspace against the real API server, the real
operator (in-process, as its ServiceAccount) and real Podman behind its Docker-compatible
socket (tests/fix_podman.py), the containers looked at through the Engine API."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest

from memplane.sandbox.docker import DockerSandboxes
from memplane_operator.backends.docker import CLASS_LABEL, container_prefix
from tests.e2e.operator.kubeobjects import apply, example
from tests.e2e.operator.sandbox_cases import (
    BadCase,
    SandboxCases,
    Seen,
    UnreachableCases,
    UnreachableDriver,
    sandbox_class,
)
from tests.fix_kube import KubeCluster
from tests.fix_podman import SANDBOX_IMAGE, podman_socket

__all__ = ["podman_socket"]  # the session fixture, visible to the tests here

pytestmark = pytest.mark.usefixtures("operator")
AWAY = "unix:///nonexistent/podman.sock"


class DockerDriver(UnreachableDriver):
    """Containers on the Podman socket, seen through aiodocker."""

    type = "docker"
    unreachable_says = f"Cannot connect to Docker Engine via {AWAY}"

    def __init__(self, engine: aiodocker.Docker, host: str) -> None:
        self.engine, self.host = engine, host

    def params(self, host: str | None = None) -> dict[str, Any]:
        return {"docker": {"host": host or self.host, "image": SANDBOX_IMAGE}}

    def bad(self) -> list[BadCase]:
        return [
            BadCase(
                self.params("ftp://docker.example"),
                "InvalidParameters",
                "spec.docker.host: 'ftp://docker.example' must start with one of unix://",
            ),
            BadCase(
                {"docker": {"host": self.host, "image": "localhost/no-such-image:1"}},
                "BackendRefused",
                "localhost/no-such-image:1",
            ),
        ]

    async def held(self, tenant: str) -> dict[str, Seen]:
        found = {}
        filters = {"label": [f"memplane.io/workspace={tenant}"]}
        for container in await self.engine.containers.list(all=True, filters=filters):
            shown = await container.show()
            found[shown["Id"]] = Seen(shown["Config"]["Labels"][CLASS_LABEL], shown["State"]["Running"])
            assert shown["Name"].lstrip("/") == container_prefix(found[shown["Id"]].class_name) + tenant
        return found

    async def make(self, namespace: str, class_name: str, tenant: str) -> str:
        made = DockerSandboxes(
            self.engine, SANDBOX_IMAGE, name_prefix=container_prefix(class_name), labels={CLASS_LABEL: class_name}
        )
        return (await made.ensure(tenant)).ref

    async def write(self, ref: str, name: str, data: bytes) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        await self.engine.containers.container(ref).put_archive("/sandbox", buffer.getvalue())  # type: ignore[no-untyped-call]

    async def read(self, ref: str, name: str) -> bytes:
        archive = await self.engine.containers.container(ref).get_archive(f"/sandbox/{name}")
        with archive:
            member = archive.next()
            assert member is not None
            data = archive.extractfile(member)
            assert data is not None
            return data.read()

    async def cleanup(self, class_name: str) -> None:
        filters = {"label": [f"{CLASS_LABEL}={class_name}"]}
        for container in await self.engine.containers.list(all=True, filters=filters):
            await container.delete(force=True)

    async def go_away(self, kube: KubeCluster, class_name: str) -> None:
        await apply(kube, sandbox_class(class_name, self.type, self.params(AWAY)))

    async def come_back(self, kube: KubeCluster, class_name: str) -> None:
        await apply(kube, sandbox_class(class_name, self.type, self.params()))


@pytest.fixture
async def driver(podman_socket: str) -> AsyncIterator[DockerDriver]:
    engine = aiodocker.Docker(url=podman_socket)
    try:
        yield DockerDriver(engine, podman_socket)
    finally:
        await engine.close()


class TestDockerSandboxes(SandboxCases, UnreachableCases):
    """The cases of sandbox_cases.py on docker."""


async def test_the_docker_example_is_a_class_the_api_server_takes(kube: KubeCluster) -> None:
    sample = example("sandboxclass-docker.yaml")
    assert sample["spec"]["type"] == "docker"
    await kube.akubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(sample))
