"""The operator's registry of SandboxClass adapters: which types have one, how a docker
class's parameters are checked (the condition names the field), how engine errors are
read (unavailable vs refused), and the open backends shared per class."""

from __future__ import annotations

import asyncio
from typing import Any

import aiodocker
import pytest

from memplane.errors import FailedPreconditionError
from memplane.sandbox.docker import DockerSandboxes
from memplane_operator import backend_docker, backends
from memplane_operator.backends import (
    BackendRefusedError,
    Backends,
    BackendUnavailableError,
    InvalidParametersError,
)


def _docker(**docker: Any) -> dict[str, Any]:
    return {"type": "docker", "docker": {"host": "unix:///run/podman/podman.sock", "image": "busybox", **docker}}


def test_the_registry_names_the_types_with_a_backend() -> None:
    assert backends.adapter_for("docker") is backend_docker
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
    assert backend_docker.ref_by_name(params, "tn-1") == "memplane-docker-a-tn-1"


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


async def test_one_open_backend_per_class_and_parameters() -> None:
    calls = Backends()
    try:
        first = await calls.get("docker-a", "docker", backends.parse("docker", "docker-a", _docker()))
        assert isinstance(first, DockerSandboxes)
        again = await calls.get("docker-a", "docker", backends.parse("docker", "docker-a", _docker()))
        assert again is first
        other = await calls.get("docker-b", "docker", backends.parse("docker", "docker-b", _docker()))
        assert other is not first
        changed = await calls.get("docker-a", "docker", backends.parse("docker", "docker-a", _docker(image="alpine")))
        assert changed is not first
        assert first._docker.session.closed  # the class's old client is closed when its parameters change
        assert not other._docker.session.closed
    finally:
        await calls.close()
    assert changed._docker.session.closed
    assert other._docker.session.closed
