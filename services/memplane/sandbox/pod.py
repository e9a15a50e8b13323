"""`PodSandboxes`: a Pod + PersistentVolumeClaim per workspace through the Kubernetes API
(kr8s, as the operator), files as tar over exec (what `kubectl cp` does).

`ensure` = `provision` (create the claim and the Pod when absent; a Pod that is
terminating, or has failed or succeeded, is waited out and created anew) + `wait_ready`
(the Pod's Ready condition, watched, within *ready_timeout_seconds*, else
`SandboxNotReadyError` saying what it waits on). The operator, which must not block a
handler for minutes, calls `provision` and then `waiting_on` on each pass instead.
`suspend` deletes the Pod and keeps the claim (the files); `destroy` deletes both. The
objects' shapes are `memplane.sandbox.podspec`'s; the sandbox root is `/sandbox` (the
claim's mount). Exec runs over the ``pods/<name>/exec`` websocket
(`memplane.sandbox.kubeexec`): writing a file sends its tar on stdin, which needs the
``v5.channel.k8s.io`` protocol (Kubernetes 1.30+). The image needs sh, tar, GNU
coreutils and findutils (`memplane.sandbox.tarexec`).

Install with `pip install 'memplane[sandbox-pod]'`. RBAC the caller needs in
*namespace*: pods (get, watch, create, delete), pods/exec (create; `get` too for
websocket upgrades on clusters before 1.31), persistentvolumeclaims (get, create,
delete).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import kr8s
import kr8s.asyncio
from kr8s.asyncio.objects import APIObject, PersistentVolumeClaim, Pod

from memplane.errors import FailedPreconditionError
from memplane.sandbox.base import ExecResult, SandboxHandle, check_workspace
from memplane.sandbox.errors import SandboxNotFoundError, SandboxNotReadyError
from memplane.sandbox.kubeexec import KubeExecError, PodGoneError, kube_exec
from memplane.sandbox.podspec import CONTAINER, SANDBOX_ROOT, claim_body, pod_body
from memplane.sandbox.tarexec import TarExecIO

_CONFLICT = 409
_ENDED = frozenset({"Failed", "Succeeded"})


class PodSandboxes(TarExecIO):
    """Pod sandboxes in one namespace. *api* is a kr8s async API client (the caller's
    credentials; it is not closed here); *namespace* where the objects live; *image* the
    sandbox container's image. Keyword-only: *name_prefix* of the Pod and the claim
    (both `<name_prefix><workspace>`); *storage* the claim's size (a quantity, "1Gi") and
    *storage_class* its StorageClass (None: the default class); *resources* the
    container's {requests, limits}; *labels* more labels for both objects; *owner* the
    Pod's controller ({apiVersion, kind, name, uid}, e.g. the MemoryWorkspace), never
    the claim's; *runtime_class* the Pod's RuntimeClass; *ready_timeout_seconds* how
    long `ensure` waits for Ready (120 s)."""

    kind = "pod"

    def __init__(
        self,
        api: kr8s.asyncio.Api,
        namespace: str,
        image: str,
        *,
        name_prefix: str = "memplane-sandbox-",
        storage: str = "1Gi",
        storage_class: str | None = None,
        resources: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        owner: Mapping[str, str] | None = None,
        runtime_class: str | None = None,
        ready_timeout_seconds: float = 120.0,
    ) -> None:
        self._api, self._namespace, self._image, self._prefix = api, namespace, image, name_prefix
        self._storage, self._storage_class = storage, storage_class
        self._resources = dict(resources) if resources is not None else None
        self._labels = dict(labels or {})
        self._owner = dict(owner) if owner is not None else None
        self._runtime_class = runtime_class
        self._ready_timeout = ready_timeout_seconds
        self._locks: dict[str, asyncio.Lock] = {}

    def name_of(self, workspace: str) -> str:
        """The name of the workspace's Pod and claim."""
        return self._prefix + check_workspace(workspace)

    def _handle(self, workspace: str) -> SandboxHandle:
        return SandboxHandle(self.kind, workspace, self.name_of(workspace), SANDBOX_ROOT)

    # -- lifecycle ------------------------------------------------------------------
    async def ensure(self, workspace: str) -> SandboxHandle:
        """`provision`, then `wait_ready`."""
        handle = await self.provision(workspace)
        await self.wait_ready(handle)
        return handle

    async def provision(self, workspace: str) -> SandboxHandle:
        """Create the workspace's claim and Pod where absent (idempotent, concurrent
        calls included) and return its handle without waiting for the Pod to run. A Pod
        terminating, failed or succeeded is waited out (within the ready timeout, else
        `SandboxNotReadyError`) and created anew."""
        name = self.name_of(workspace)
        async with self._locks.setdefault(workspace, asyncio.Lock()):
            claim = claim_body(
                name, self._namespace, workspace,
                storage=self._storage, storage_class=self._storage_class, labels=self._labels,
            )  # fmt: skip
            await self._kube_create(PersistentVolumeClaim, claim)
            pod = await self._kube_get(Pod, name)
            if pod is not None and _ended_or_ending(pod.raw):
                await self._kube_delete(Pod, name)
                try:
                    async with asyncio.timeout(self._ready_timeout):
                        await pod.wait("delete")
                except TimeoutError:
                    raise SandboxNotReadyError(workspace, f"pod {name} is still terminating") from None
            await self._kube_create(Pod, self._pod(name, workspace))
        return self._handle(workspace)

    def _pod(self, name: str, workspace: str) -> dict[str, Any]:
        return pod_body(
            name, self._namespace, workspace, self._image, name,
            resources=self._resources, labels=self._labels, owner=self._owner, runtime_class=self._runtime_class,
        )  # fmt: skip

    async def ready(self, handle: SandboxHandle) -> bool:
        """Whether the handle's Pod exists and its Ready condition is True (one GET)."""
        return await self.waiting_on(handle) is None

    async def waiting_on(self, handle: SandboxHandle) -> str | None:
        """None when the handle's Pod is Ready, else what it waits on (`describe`, or that
        it does not exist), from one GET."""
        name = self._name(handle)
        pod = await self._kube_get(Pod, name)
        if pod is None:
            return f"pod {name} does not exist"
        return None if _is_ready(pod.raw) else describe(pod.raw)

    async def wait_ready(self, handle: SandboxHandle) -> None:
        """Wait (a watch, no polling) until the Pod is Ready; `SandboxNotReadyError`
        after the ready timeout, naming the Pod's phase and what its conditions and
        container report (unschedulable, an unbound claim, an image not pulled)."""
        name = self._name(handle)
        pod = Pod({"metadata": {"name": name, "namespace": self._namespace}}, api=self._api)
        try:
            async with asyncio.timeout(self._ready_timeout):
                await pod.wait("condition=Ready")
        except TimeoutError:
            current = await self._kube_get(Pod, name)
            why = describe(current.raw) if current is not None else f"pod {name} does not exist"
            raise SandboxNotReadyError(handle.workspace, why) from None

    async def suspend(self, handle: SandboxHandle) -> None:
        """Delete the Pod (compute released); the claim and its files stay."""
        await self._kube_delete(Pod, self._name(handle))

    async def destroy(self, handle: SandboxHandle) -> None:
        """Delete the Pod and the claim (the files go with the claim's volume)."""
        name = self._name(handle)
        await self._kube_delete(Pod, name)
        await self._kube_delete(PersistentVolumeClaim, name)

    def _name(self, handle: SandboxHandle) -> str:
        """The handle's Pod, checked to be this backend's; `SandboxNotFoundError` else."""
        if handle.backend != self.kind or handle.ref != self.name_of(handle.workspace):
            raise SandboxNotFoundError(handle.workspace)
        return handle.ref

    # -- Kubernetes calls -----------------------------------------------------------
    def _object(self, kind: type[APIObject], body: dict[str, Any]) -> APIObject:
        return kind(body, api=self._api)

    async def _kube_get(self, kind: type[APIObject], name: str) -> APIObject | None:
        obj = self._object(kind, {"metadata": {"name": name, "namespace": self._namespace}})
        try:
            await obj.refresh()
        except kr8s.NotFoundError:
            return None
        return obj

    async def _kube_create(self, kind: type[APIObject], body: dict[str, Any]) -> None:
        """Create *body*; one that exists already (409) is left as it is. Raises
        `FailedPreconditionError` with the API server's message when it refuses the
        object (invalid, forbidden by admission or RBAC, over a quota)."""
        try:
            await self._object(kind, body).create()
        except kr8s.ServerError as error:
            status = error.response.status_code if error.response is not None else None
            if status == _CONFLICT:
                return
            if status is not None and 400 <= status < 500:
                raise FailedPreconditionError(f"cannot create the sandbox's {body['kind']}: {error}") from error
            raise

    async def _kube_delete(self, kind: type[APIObject], name: str) -> None:
        with contextlib.suppress(kr8s.NotFoundError):  # gone already
            await self._object(kind, {"metadata": {"name": name, "namespace": self._namespace}}).delete()

    # -- the exec stream ------------------------------------------------------------
    async def _stream(self, handle: SandboxHandle, argv: list[str], stdin: bytes | None) -> ExecResult:
        """Over the exec websocket; a Pod that is not running (the exec refused) is
        `SandboxNotReadyError` saying what it reports, a deleted one `SandboxNotFoundError`."""
        name = self._name(handle)
        try:
            return await kube_exec(self._api, self._namespace, name, container=CONTAINER, argv=argv, stdin=stdin)
        except PodGoneError:
            raise SandboxNotFoundError(handle.workspace) from None
        except KubeExecError as exc:
            pod = await self._kube_get(Pod, name)
            if pod is None:
                raise SandboxNotFoundError(handle.workspace) from None
            raw: Mapping[str, Any] = pod.raw
            if (raw.get("status") or {}).get("phase") != "Running":
                raise SandboxNotReadyError(handle.workspace, f"{describe(raw)} ({exc})") from None
            raise


def _ended_or_ending(raw: Mapping[str, Any]) -> bool:
    """Whether a Pod is terminating, or has failed or succeeded (it will not run again)."""
    phase = (raw.get("status") or {}).get("phase")
    return bool((raw.get("metadata") or {}).get("deletionTimestamp")) or phase in _ENDED


def _is_ready(raw: Mapping[str, Any]) -> bool:
    conditions = (raw.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def describe(raw: Mapping[str, Any]) -> str:
    """What a Pod that is not Ready reports: its phase, each condition not True (type,
    reason, message) and each container waiting or terminated (reason, message)."""
    status = raw.get("status") or {}
    parts = [f"pod {raw.get('metadata', {}).get('name')} is {status.get('phase') or 'Pending'}"]
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            detail = ": ".join(x for x in (condition.get("reason"), condition.get("message")) if x)
            parts.append(f"{condition.get('type')} {condition.get('status')}" + (f" ({detail})" if detail else ""))
    for container in status.get("containerStatuses") or []:
        for state, info in (container.get("state") or {}).items():
            if state != "running" and isinstance(info, Mapping):
                detail = ": ".join(x for x in (info.get("reason"), info.get("message")) if x)
                parts.append(f"container {container.get('name')} {state}" + (f" ({detail})" if detail else ""))
    return "; ".join(parts) if len(parts) > 1 else parts[0] + " (no status yet: not scheduled?)"
