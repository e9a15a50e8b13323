"""SandboxClass type `docker`: a container per workspace over the Docker Engine API
(`memplane.sandbox.docker.DockerSandboxes`, aiodocker), Docker or Podman's compatible socket.

Parameters (``spec.docker``): ``host`` (``unix:///absolute/path.sock``, ``tcp://host:port``,
``http://`` or ``https://`` host[:port]; the operator's pod must reach it: mount the socket
or use TCP), ``image`` (the engine must have it: nothing is pulled) and ``network``
(default ``none``). Containers are named ``memplane-<class>-<tenantId>`` and labelled
``memplane.io/workspace``, ``memplane.io/sandbox-class`` and
``app.kubernetes.io/managed-by=memplane-operator``, so an ensure after a crash finds the
container it made before (by name) instead of making a second one, and two classes never
share a container.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiodocker

from memplane.sandbox.docker import DockerSandboxes
from memplane_operator.backends.base import (
    CLASS_LABEL,
    ErrorTable,
    InvalidParametersError,
    OpenBackend,
    Target,
    check_image,
    start_by_ensure,
)

TYPE = "docker"
SHARED = True  # one aiodocker client per class
MANAGED_BY = {"app.kubernetes.io/managed-by": "memplane-operator"}
_SCHEMES = ("unix", "tcp", "http", "https")
_NETWORK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_CONNECT_FAILED = 900  # aiodocker's status for "cannot connect to the engine"


@dataclass(frozen=True)
class DockerParams:
    """The parameters of a docker SandboxClass."""

    class_name: str
    host: str
    image: str
    network: str = "none"


def _check_host(host: str) -> str:
    field = "spec.docker.host"
    parts = urlsplit(host)
    if parts.scheme not in _SCHEMES:
        raise InvalidParametersError(field, f"{host!r} must start with one of {', '.join(s + '://' for s in _SCHEMES)}")
    if parts.scheme == "unix":
        if not parts.path.startswith("/") or parts.netloc:
            raise InvalidParametersError(field, f"{host!r} must name an absolute socket path: unix:///run/docker.sock")
        return host
    try:
        port = parts.port
    except ValueError as error:
        raise InvalidParametersError(field, f"{host!r}: {error}") from error
    if not parts.hostname or (parts.scheme == "tcp" and port is None):
        raise InvalidParametersError(field, f"{host!r} must name a host and port: tcp://docker.example:2375")
    return host


def parse(class_name: str, spec: Mapping[str, Any]) -> DockerParams:
    """The parameters of SandboxClass *class_name* (its *spec*). Raises
    `InvalidParametersError` naming the field (``spec.docker.host`` ...)."""
    docker = spec.get("docker") or {}
    host = str(docker.get("host") or "")
    image = str(docker.get("image") or "")
    network = str(docker.get("network") or "none")
    check_image("spec.docker.image", image)
    if not _NETWORK.match(network):
        raise InvalidParametersError("spec.docker.network", f"{network!r} is not a network name")
    return DockerParams(class_name=class_name, host=_check_host(host), image=image, network=network)


def container_prefix(class_name: str) -> str:
    """Names of the class's containers start with this; the tenantId follows."""
    return f"memplane-{class_name}-"


def container_name(params: DockerParams, workspace: str) -> str:
    """The container's name (the Engine API takes a name wherever it takes an id)."""
    return container_prefix(params.class_name) + workspace


start = start_by_ensure  # the container made or started: ready once it runs


async def ref_by_name(backend: DockerSandboxes, params: DockerParams, workspace: str) -> str:
    """The container's name: a suspend or destroy of a container that does not exist does nothing."""
    return container_name(params, workspace)


async def open_backend(params: DockerParams, target: Target | None = None) -> OpenBackend:
    """A `DockerSandboxes` over a new aiodocker client of *params.host* (no call is made
    until the first lifecycle call), shared by every workspace of the class (*target*
    unused); `close` closes the client."""
    docker = aiodocker.Docker(url=params.host)
    backend = DockerSandboxes(
        docker,
        params.image,
        name_prefix=container_prefix(params.class_name),
        labels={**MANAGED_BY, CLASS_LABEL: params.class_name},
        network=params.network,
    )
    return OpenBackend(backend=backend, close=docker.close)


def _status(error: aiodocker.DockerError) -> int | None:
    return None if error.status == _CONNECT_FAILED else error.status


ERRORS = ErrorTable(
    service="the Docker engine", api_error=aiodocker.DockerError, status_of=_status, detail_of=lambda e: e.message
)


def classify(error: BaseException) -> Exception | None:
    """`ERRORS` (`ErrorTable`): an image the engine cannot create from, or a 4xx ->
    `BackendRefusedError`; no connection (aiodocker's 900), a 5xx or a socket error ->
    `BackendUnavailableError`; anything else -> None."""
    return ERRORS.classify(error)
