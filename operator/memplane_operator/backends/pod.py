"""SandboxClass type `pod`: a Pod + PersistentVolumeClaim per workspace in the
workspace's own namespace (`memplane.sandbox.pod.PodSandboxes`, through the operator's
kr8s client and ServiceAccount).

Parameters (``spec.pod``): ``image`` (the sandbox container's; it needs sh, tar, GNU
coreutils and findutils), ``storageClassName`` (the claim's; unset: the cluster's
default) and ``runtimeClassName`` (the Pod's, e.g. gvisor); the claim's size is the
workspace's ``spec.sandbox.storageSize``. Both objects are named
``memplane-<class>-<tenantId>`` and labelled ``memplane.io/workspace`` and
``memplane.io/sandbox-class``; the Pod is owned by the MemoryWorkspace (garbage-collected
with it should the finalizer ever be bypassed), the claim never is (reclaimPolicy decides).

A Pod becomes Ready by itself (scheduled, its volume bound, its image pulled), so `start`
does not wait for it: it makes the objects and reports what the Pod waits on; the next
pass looks again. Suspend deletes the Pod and keeps the claim; destroy deletes both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import kr8s

from memplane.sandbox.errors import SandboxNotReadyError
from memplane.sandbox.kubeexec import KubeExecError
from memplane.sandbox.pod import PodSandboxes
from memplane_operator.backends.base import (
    CLASS_LABEL,
    BackendUnavailableError,
    ErrorTable,
    InvalidParametersError,
    OpenBackend,
    Reading,
    Started,
    Target,
    check_image,
    nothing_to_close,
)

TYPE = "pod"
SHARED = False  # one per workspace: its namespace, owner and claim size
WAITING_REASON = "PodNotReady"
READY_TIMEOUT_SECONDS = 30.0  # how long `start` waits for a terminating Pod to go before making it anew
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_MAX = 63  # a label value's limit: the class name is one


@dataclass(frozen=True)
class PodParams:
    """The parameters of a pod SandboxClass."""

    class_name: str
    image: str
    storage_class: str | None = None
    runtime_class: str | None = None


def _object_name(field: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    text = str(value)
    if len(text) > 253 or not _SUBDOMAIN.match(text):
        raise InvalidParametersError(field, f"{text!r} is not an object name (lowercase DNS subdomain)")
    return text


def parse(class_name: str, spec: Mapping[str, Any]) -> PodParams:
    """The parameters of SandboxClass *class_name* (its *spec*). Raises
    `InvalidParametersError` naming the field (``spec.pod.image`` ...)."""
    pod = spec.get("pod") or {}
    image = str(pod.get("image") or "")
    check_image("spec.pod.image", image)
    if len(class_name) > _LABEL_MAX:
        raise InvalidParametersError(
            "metadata.name", f"{class_name!r} is longer than {_LABEL_MAX} characters, the limit of label {CLASS_LABEL}"
        )
    return PodParams(
        class_name=class_name,
        image=image,
        storage_class=_object_name("spec.pod.storageClassName", pod.get("storageClassName")),
        runtime_class=_object_name("spec.pod.runtimeClassName", pod.get("runtimeClassName")),
    )


def name_prefix(class_name: str) -> str:
    """Names of the class's Pods and claims start with this; the tenantId follows."""
    return f"memplane-{class_name}-"


async def open_backend(params: PodParams, target: Target) -> OpenBackend:
    """A `PodSandboxes` for *target*'s workspace, on the operator's kr8s client (nothing
    of its own to close)."""
    owner = {key: target.owner[key] for key in ("apiVersion", "kind", "name", "uid")}
    backend = PodSandboxes(
        target.kube.api,
        target.namespace,
        params.image,
        name_prefix=name_prefix(params.class_name),
        storage=target.storage,
        storage_class=params.storage_class,
        labels={CLASS_LABEL: params.class_name},
        owner=owner,
        runtime_class=params.runtime_class,
        ready_timeout_seconds=READY_TIMEOUT_SECONDS,
    )
    return OpenBackend(backend=backend, close=nothing_to_close)


async def start(backend: PodSandboxes, workspace: str) -> Started:
    """`provision` (the claim and Pod made where absent), then one look at the Pod: ready,
    or what it waits on (reason PodNotReady)."""
    handle = await backend.provision(workspace)
    waiting = await backend.waiting_on(handle)
    return Started(handle) if waiting is None else Started(handle, f"waiting for the Pod: {waiting}", WAITING_REASON)


async def ref_by_name(backend: PodSandboxes, params: PodParams, workspace: str) -> str:
    """The Pod's and claim's name (deleting what does not exist does nothing)."""
    return backend.name_of(workspace)


def _status(error: kr8s.ServerError) -> int | None:
    return error.response.status_code if error.response is not None else None


ERRORS = ErrorTable(
    service="the Kubernetes API",
    api_error=kr8s.ServerError,
    status_of=_status,
    transport=(httpx.TransportError, OSError),
    first=(
        Reading(SandboxNotReadyError, BackendUnavailableError),
        Reading(KubeExecError, BackendUnavailableError, "exec into the sandbox Pod failed: "),
    ),
)


def classify(error: BaseException) -> Exception | None:
    """`ERRORS` (`ErrorTable`): the API server refusing an object (invalid, forbidden, over
    a quota) or a 4xx -> `BackendRefusedError`; a 5xx, a Pod still terminating, or no
    connection -> `BackendUnavailableError`; an exec into the Pod refused or cut (the file
    sync's) -> `BackendUnavailableError`; anything else -> None."""
    return ERRORS.classify(error)
