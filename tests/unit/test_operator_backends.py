"""The operator's registry of SandboxClass adapters: which types have one, how a class's
parameters are checked (the condition names the field), how backend errors are read
(unavailable vs refused), and the open backends shared per class (docker) or opened per
use (pod, e2b)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiodocker
import httpx
import kr8s
import pytest
from e2b import AuthenticationException, RateLimitException, SandboxException, TimeoutException

from memplane.errors import FailedPreconditionError
from memplane.sandbox.docker import DockerSandboxes
from memplane.sandbox.errors import SandboxNotReadyError
from memplane_operator import backends
from memplane_operator.backends import (
    BackendRefusedError,
    Backends,
    BackendUnavailableError,
    InvalidParametersError,
    Target,
)
from memplane_operator.backends import docker as backend_docker
from memplane_operator.backends import e2b as backend_e2b
from memplane_operator.backends import pod as backend_pod
from memplane_operator.kube import Kube

# A docker class is shared by every workspace: its target is not looked at.
TARGET = Target(namespace="t", owner={}, storage="1Gi", kube=Kube.__new__(Kube), own_namespace="memplane-system")


def _docker(**docker: Any) -> dict[str, Any]:
    return {"type": "docker", "docker": {"host": "unix:///run/podman/podman.sock", "image": "busybox", **docker}}


def test_the_registry_names_the_types_with_a_backend() -> None:
    assert backends.adapter_for("docker") is backend_docker
    assert backends.adapter_for("pod") is backend_pod
    assert backends.adapter_for("e2b") is backend_e2b
    for built_in in ("none", "local"):  # provisioned by the operator itself
        assert backends.adapter_for(built_in) is None
    assert backends.adapter_for("kvm") is None


@pytest.mark.parametrize(
    "host",
    ["unix:///run/podman/podman.sock", "tcp://docker.example:2375", "https://docker.example", "http://10.0.0.1:2375"],
)
def test_docker_hosts_the_engine_api_takes(host: str) -> None:
    params = backends.parse("docker", "docker-a", _docker(host=host))
    assert params == backend_docker.DockerParams(class_name="docker-a", host=host, image="busybox", network="none")


@pytest.mark.parametrize(
    ("docker", "field", "says"),
    [
        ({"host": "ftp://docker.example"}, "spec.docker.host", "must start with one of unix://"),
        ({"host": "/run/docker.sock"}, "spec.docker.host", "must start with one of"),
        ({"host": "unix://run/docker.sock"}, "spec.docker.host", "absolute socket path"),
        ({"host": "tcp://docker.example"}, "spec.docker.host", "host and port"),
        ({"host": "tcp://docker.example:99999"}, "spec.docker.host", "out of range"),
        ({"image": "busy box"}, "spec.docker.image", "not an image reference"),
        ({"network": "no net"}, "spec.docker.network", "not a network name"),
    ],
)
def test_bad_docker_parameters_name_the_field(docker: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidParametersError) as caught:
        backends.parse("docker", "docker-a", _docker(**docker))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert says in str(caught.value)


def test_containers_are_named_by_class_and_tenant() -> None:
    params = backends.parse("docker", "docker-a", _docker())
    assert backend_docker.container_name(params, "tn-1") == "memplane-docker-a-tn-1"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (aiodocker.DockerError(900, "Cannot connect to Docker Engine via unix:///x.sock"), BackendUnavailableError),
        (aiodocker.DockerError(500, "internal error"), BackendUnavailableError),
        (aiodocker.DockerError(404, "no such image"), BackendRefusedError),
        (FailedPreconditionError("cannot create a sandbox from image 'x'"), BackendRefusedError),
        (ConnectionResetError("reset by peer"), BackendUnavailableError),
    ],
)
def test_engine_errors_read_as_unavailable_or_refused(error: BaseException, kind: type[Exception]) -> None:
    assert isinstance(backend_docker.classify(error), kind)


def test_errors_not_of_the_engine_are_not_classified() -> None:
    assert backend_docker.classify(KeyError("state")) is None


async def test_a_call_with_no_answer_is_unavailable_not_a_hang() -> None:
    never = asyncio.Event()
    with pytest.raises(BackendUnavailableError, match=r"ensure x: no answer within 0.05 s"):
        await Backends(call_timeout_seconds=0.05).call("docker", "ensure x", never.wait())


async def test_a_call_maps_the_adapters_errors_and_passes_others() -> None:
    calls = Backends()

    async def refuse() -> None:
        raise aiodocker.DockerError(404, "no such image: busybox")

    async def crash() -> None:
        raise KeyError("state")

    with pytest.raises(BackendRefusedError, match=r"ensure x: the Docker engine refused \(404\)"):
        await calls.call("docker", "ensure x", refuse())
    with pytest.raises(KeyError):
        await calls.call("docker", "ensure x", crash())


async def _docker_backend(calls: Backends, class_name: str, **docker: Any) -> DockerSandboxes:
    params = backends.parse("docker", class_name, _docker(**docker))
    async with calls.use(class_name, "docker", params, TARGET) as backend:
        assert isinstance(backend, DockerSandboxes)
        return backend


async def test_one_open_backend_per_class_and_parameters() -> None:
    calls = Backends()
    try:
        first = await _docker_backend(calls, "docker-a")
        again = await _docker_backend(calls, "docker-a")
        assert again is first
        assert not first._docker.session.closed  # kept open for the next use
        other = await _docker_backend(calls, "docker-b")
        assert other is not first
        changed = await _docker_backend(calls, "docker-a", image="alpine")
        assert changed is not first
        assert first._docker.session.closed  # the class's old client is closed when its parameters change
        assert not other._docker.session.closed
    finally:
        await calls.close()
    assert changed._docker.session.closed
    assert other._docker.session.closed


def _pod(**pod: Any) -> dict[str, Any]:
    return {"type": "pod", "pod": {"image": "localhost/memplane-base:bookworm", **pod}}


def test_pod_parameters() -> None:
    params = backends.parse("pod", "pods-a", _pod(storageClassName="fast-ssd", runtimeClassName="gvisor"))
    assert params == backend_pod.PodParams(
        class_name="pods-a", image="localhost/memplane-base:bookworm", storage_class="fast-ssd", runtime_class="gvisor"
    )
    assert backends.parse("pod", "pods-a", _pod()).storage_class is None  # the cluster's default class


@pytest.mark.parametrize(
    ("class_name", "pod", "field", "says"),
    [
        ("pods-a", {"image": "busy box"}, "spec.pod.image", "not an image reference"),
        ("pods-a", {"storageClassName": "Fast_SSD"}, "spec.pod.storageClassName", "not an object name"),
        ("pods-a", {"runtimeClassName": "g visor"}, "spec.pod.runtimeClassName", "not an object name"),
        ("p" * 64, {}, "metadata.name", "limit of label memplane.io/sandbox-class"),
    ],
)
def test_bad_pod_parameters_name_the_field(class_name: str, pod: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidParametersError) as caught:
        backends.parse("pod", class_name, _pod(**pod))
    assert caught.value.field == field
    assert says in str(caught.value)


def _response(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("POST", "https://kube.example/api/v1/pods"))


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (FailedPreconditionError("cannot create the sandbox's Pod: forbidden"), BackendRefusedError),
        (kr8s.ServerError("forbidden", response=_response(403)), BackendRefusedError),
        (kr8s.ServerError("etcd timeout", response=_response(500)), BackendUnavailableError),
        (SandboxNotReadyError("tn-1", "pod x is still terminating"), BackendUnavailableError),
        (httpx.ConnectError("connection refused"), BackendUnavailableError),
    ],
)
def test_kubernetes_errors_read_as_unavailable_or_refused(error: BaseException, kind: type[Exception]) -> None:
    assert isinstance(backend_pod.classify(error), kind)
    assert backend_pod.classify(KeyError("phase")) is None


def _e2b(**e2b: Any) -> dict[str, Any]:
    ref = {"name": "e2b", "key": "api-key"}
    return {"type": "e2b", "e2b": {"template": "memplane-sandbox", "apiKeySecretRef": ref, **e2b}}


def test_e2b_parameters_hold_the_secret_s_name_not_the_key() -> None:
    params = backends.parse("e2b", "e2b-a", _e2b(domain="e2b.example.com"))
    assert params == backend_e2b.E2BParams(
        class_name="e2b-a", template="memplane-sandbox", secret_name="e2b", secret_key="api-key",
        domain="e2b.example.com",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("e2b", "field", "says"),
    [
        ({"template": "my template"}, "spec.e2b.template", "not an E2B template"),
        ({"domain": "https://e2b.app"}, "spec.e2b.domain", "not a domain name"),
        ({"apiKeySecretRef": {"name": "e2b"}}, "spec.e2b.apiKeySecretRef", "name and key of a Secret"),
    ],
)
def test_bad_e2b_parameters_name_the_field(e2b: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidParametersError) as caught:
        backends.parse("e2b", "e2b-a", _e2b(**e2b))
    assert caught.value.field == field
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (AuthenticationException("401: Unauthorized"), BackendRefusedError),
        (SandboxException("400: template not found", status_code=400), BackendRefusedError),
        (SandboxException("500: internal", status_code=500), BackendUnavailableError),
        (RateLimitException("429: Rate limit exceeded"), BackendUnavailableError),
        (TimeoutException("Request timed out"), BackendUnavailableError),
        (httpx.ConnectError("connection refused"), BackendUnavailableError),
    ],
)
def test_e2b_errors_read_as_unavailable_or_refused(error: BaseException, kind: type[Exception]) -> None:
    assert isinstance(backend_e2b.classify(error), kind)
    assert backend_e2b.classify(KeyError("sandboxID")) is None
