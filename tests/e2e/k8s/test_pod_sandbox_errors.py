"""The operator's reading of the pod backend's failures (`memplane_operator.backends.pod.ERRORS`)
on a real kube-apiserver: a caller the API server forbids (403: refused, only an RBAC edit
helps) and an API server nothing answers for (unavailable, retried). The docker and e2b
backends' are in tests/contract/test_backend_errors.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import kr8s.asyncio
import pytest

from memplane.sandbox.pod import PodSandboxes
from memplane_operator.backends import BackendRefusedError, Backends, BackendUnavailableError
from tests.fix_kube import KubeCluster

IMAGE = "registry.example/memplane-sandbox:1"


def _workspace() -> str:
    return f"ws-{uuid.uuid4().hex[:8]}"


def _nobody(kube: KubeCluster, namespace: str, path: Path) -> Path:
    """A kubeconfig at *path* of a ServiceAccount with no role at all."""
    kube.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    token = kube.kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
    return kube.kubeconfig_for_token(token, path, namespace)


async def test_a_forbidden_call_is_a_refusal_naming_the_api(
    kube: KubeCluster, k8s_namespace: str, tmp_path: Path
) -> None:
    api = await kr8s.asyncio.api(kubeconfig=str(_nobody(kube, k8s_namespace, tmp_path / "nobody")))
    backend = PodSandboxes(api, k8s_namespace, IMAGE)
    calls, workspace = Backends(), _workspace()
    with pytest.raises(
        BackendRefusedError, match=r"^ensure a: cannot create the sandbox's PersistentVolumeClaim: .*forbidden"
    ):
        await calls.call("pod", "ensure a", backend.provision(workspace))
    handle = backend._handle(workspace)  # what the operator recorded, for a suspend
    with pytest.raises(BackendRefusedError, match=r"^suspend a: the Kubernetes API refused \(403\): .*forbidden"):
        await calls.call("pod", "suspend a", backend.suspend(handle))


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def _relay(target: str) -> AsyncIterator[str]:
    """A TCP relay on loopback to *target* (https://host:port): its https:// URL; on
    leaving, it stops listening and cuts every connection (the API server gone)."""
    parts = urlsplit(target)
    open_: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
        open_.extend((writer, up_writer))
        await asyncio.gather(_forward(reader, up_writer), _forward(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for writer in open_:
            writer.transport.abort()
        await server.wait_closed()


async def test_an_api_server_gone_is_unavailable(kube: KubeCluster, k8s_namespace: str, tmp_path: Path) -> None:
    path = _nobody(kube, k8s_namespace, tmp_path / "relayed")
    async with _relay(kube.server) as relayed:
        config = json.loads(path.read_text())
        config["clusters"][0]["cluster"]["server"] = relayed  # the serving certificate names 127.0.0.1
        path.write_text(json.dumps(config))
        api = await kr8s.asyncio.api(kubeconfig=str(path))  # reaches the API server (its version)
    backend = PodSandboxes(api, k8s_namespace, IMAGE)
    with pytest.raises(BackendUnavailableError, match=r"^ensure b: the Kubernetes API is unreachable: "):
        await Backends().call("pod", "ensure b", backend.provision(_workspace()))
