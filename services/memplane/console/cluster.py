"""The admin view's cluster side: each `MemoryWorkspace` custom resource (memplane.io/v1alpha1)
with its status conditions and observedGeneration, read from the Kubernetes API through
kr8s when the console has access to one:

- ``--kubeconfig PATH``: that kubeconfig (its current context);
- else inside a Pod (KUBERNETES_SERVICE_HOST set and a ServiceAccount token mounted): the
  Pod's ServiceAccount, which the chart binds to a ClusterRole that may only get, list and
  watch memoryworkspaces;
- else none: the page says the console has no cluster access, and nothing else changes.

``--kube-namespace NS`` lists one namespace's (a Role there suffices); by default every
namespace's. Each admin page load lists them once (no cache, no watch): an admin page is
rare, and what it shows is current. A cluster that refuses (RBAC, no CRD, unreachable) is
an answer with ``available: false`` and the reason, never an error of the page.

    GET api/admin/memoryworkspaces -> {available, reason, namespace,
        items: [{namespace, name, tenant_id, workspace, phase, generation, observed_generation,
                 conditions: [{type, status, reason, message, last_transition_time, observed_generation}]}]}
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kr8s.asyncio import Api

GROUP = "memplane.io"
VERSION = "v1alpha1"
PLURAL = "memoryworkspaces"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_SECONDS = 5.0  # an admin page waits this long for the API server, then says it did not answer
MAX_ITEMS = 1_000  # MemoryWorkspaces shown at most (one list call, `limit`)

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class ClusterAccess:
    """Where the console reads MemoryWorkspaces: a kubeconfig file, the Pod's ServiceAccount
    (*kubeconfig* None, *in_cluster* True), or nowhere (both unset: `why` says so).
    *namespace* None lists every namespace."""

    kubeconfig: str | None = None
    in_cluster: bool = False
    namespace: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether there is a cluster to ask."""
        return self.kubeconfig is not None or self.in_cluster

    @property
    def why(self) -> str:
        """Why there is none, for the page."""
        return "the console runs outside a Kubernetes cluster and was given no --kubeconfig"


def access_from(
    kubeconfig: str | None, namespace: str | None, environ: Mapping[str, str] | None = None
) -> ClusterAccess:
    """The access of the flags: *kubeconfig* when given, else the Pod's ServiceAccount when
    the process runs in one (KUBERNETES_SERVICE_HOST and a mounted token), else none."""
    env = os.environ if environ is None else environ
    in_pod = bool(env.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").is_file()
    return ClusterAccess(
        kubeconfig=kubeconfig or None, in_cluster=not kubeconfig and in_pod, namespace=namespace or None
    )


def _condition(c: JsonObject) -> JsonObject:
    return {
        "type": str(c.get("type", "")),
        "status": str(c.get("status", "")),
        "reason": str(c.get("reason", "")),
        "message": str(c.get("message", "")),
        "last_transition_time": str(c.get("lastTransitionTime", "")),
        "observed_generation": c.get("observedGeneration"),
    }


def item(obj: JsonObject) -> JsonObject:
    """One MemoryWorkspace as the page shows it (the CRD's camelCase turned snake_case)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return {
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "tenant_id": str(spec.get("tenantId", "")),
        "workspace": str(status.get("workspace", "")),
        "phase": str(status.get("phase", "")),
        "generation": meta.get("generation"),
        "observed_generation": status.get("observedGeneration"),
        "conditions": [_condition(c) for c in status.get("conditions") or [] if isinstance(c, dict)],
    }


class MemoryWorkspaces:
    """Lists MemoryWorkspaces through one kr8s client, made at the first list."""

    def __init__(self, access: ClusterAccess) -> None:
        self._access = access
        self._api: Api | None = None

    async def _client(self) -> Api:
        if self._api is None:
            import kr8s.asyncio  # noqa: PLC0415 - only with cluster access

            self._api = await kr8s.asyncio.api(kubeconfig=self._access.kubeconfig)
        return self._api

    def _answer(self, *, available: bool, reason: str = "", items: list[JsonObject] | None = None) -> JsonObject:
        return {"available": available, "reason": reason, "namespace": self._access.namespace, "items": items or []}

    async def list(self) -> JsonObject:
        """The MemoryWorkspaces by namespace and name, or ``available: false`` with the
        reason: no access configured, kr8s missing, the API server refusing (its message:
        RBAC, no CRD) or not answering within `TIMEOUT_SECONDS`."""
        if not self._access.enabled:
            return self._answer(available=False, reason=self._access.why)
        try:
            import kr8s  # noqa: PLC0415 - only with cluster access
        except ImportError:
            return self._answer(available=False, reason="kr8s is not installed: pip install 'memplane[console]'")
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                api = await self._client()
                async with api.call_api(
                    "GET",
                    version=VERSION,
                    base=f"/apis/{GROUP}",
                    namespace=self._access.namespace,
                    url=PLURAL,
                    params={"limit": MAX_ITEMS},
                ) as response:
                    body = response.json()
        except TimeoutError:
            return self._answer(available=False, reason=f"the Kubernetes API did not answer in {TIMEOUT_SECONDS:g} s")
        except kr8s.ServerError as error:
            code = error.response.status_code if error.response is not None else 0
            return self._answer(available=False, reason=f"the Kubernetes API refused ({code}): {error}")
        except Exception as error:  # any failure to reach it is an answer for the page
            self._api = None  # a fresh client next time (credentials may have been fixed)
            return self._answer(available=False, reason=f"the Kubernetes API is unreachable: {error}")
        items = sorted((item(o) for o in body.get("items") or []), key=lambda i: (i["namespace"], i["name"]))
        return self._answer(available=True, items=items)
