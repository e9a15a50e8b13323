"""Small helpers of the operator tests: manifests, apply / get / wait through kubectl, and
waiting on a condition that kubectl cannot wait for (bounded; it polls the thing itself)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.fix_kube import KubeCluster

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "operator" / "examples"
T = TypeVar("T")


def example(name: str) -> dict[str, Any]:
    """A manifest of operator/examples/ (the samples of README.md#on-kubernetes and docs/operations/operator.md)."""
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def random_tenant() -> str:
    return f"tn-{secrets.token_hex(5)}"


def workspace(namespace: str, name: str, tenant: str | None = None, **spec: Any) -> dict[str, Any]:
    """A MemoryWorkspace manifest (reclaimPolicy Delete unless given, so tests leave no data)."""
    return {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "MemoryWorkspace",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tenantId": tenant or random_tenant(), "reclaimPolicy": "Delete", **spec},
    }


async def apply(kube: KubeCluster, *objects: dict[str, Any]) -> None:
    """`kubectl apply` the objects (server-side validation: a bad one raises KubeCommandError)."""
    for obj in objects:
        await kube.akubectl("apply", "-f", "-", input=json.dumps(obj))


async def get(kube: KubeCluster, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    """The object as JSON."""
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    found: dict[str, Any] = json.loads((await kube.akubectl(*args)).stdout)
    return found


async def wait_for(kube: KubeCluster, what: str, target: str, namespace: str, seconds: int = 90) -> None:
    """`kubectl wait --for=<what> <target>`: a condition ("condition=Ready"), a JSONPath
    ("jsonpath={.status.phase}=Conflict"), "create" or "delete"."""
    await kube.akubectl("wait", f"--for={what}", target, "-n", namespace, f"--timeout={seconds}s", timeout=seconds + 30)


async def wait_ready(kube: KubeCluster, namespace: str, name: str, seconds: int = 90) -> dict[str, Any]:
    """Wait for Ready=True; return the object."""
    await wait_for(kube, "condition=Ready", f"memoryworkspace/{name}", namespace, seconds)
    return await get(kube, "memoryworkspace", name, namespace)


async def secret_env(kube: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    """The data of a Secret, decoded (what `envFrom` puts in a pod's environment)."""
    secret = await get(kube, "secret", name, namespace)
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The status condition *kind* of an object (KeyError if absent)."""
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    raise KeyError(kind)


async def eventually(check: Callable[[], Awaitable[T | None]], seconds: float = 60.0, what: str = "") -> T:
    """Call *check* until it returns something other than None (returned), for at most
    *seconds*. For states no watch reports (a key revoked in memplane); the pause between
    tries only spaces them out."""
    deadline = time.monotonic() + seconds
    while True:
        result = await check()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {seconds} s: {what}")
        await asyncio.sleep(0.2)


def condition_reason_is(kind: str, reason: str) -> str:
    """The `wait_for` JSONPath of condition *kind* having reason *reason*."""
    return f"jsonpath={{.status.conditions[?(@.type=='{kind}')].reason}}={reason}"


async def events_of(kube: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Kubernetes Events about the object *name* in *namespace*, oldest first."""
    listed = await kube.akubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return sorted(items, key=lambda e: (e.get("eventTime") or e.get("firstTimestamp") or "", e["metadata"]["name"]))


async def events_during(kube: KubeCluster, namespace: str, name: str, seconds: int) -> list[str]:
    """Reasons of the Events about *name* posted during a watch of *seconds* (a watch, not
    a sleep: the observation window of an absence)."""
    done = await kube.akubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", "--watch-only",
        "-o", "json", f"--request-timeout={seconds}s", check=False, timeout=seconds + 30,
    )  # fmt: skip
    decoder = json.JSONDecoder()
    text, reasons = done.stdout.strip(), []
    while text:
        event, end = decoder.raw_decode(text)
        reasons.append(str(event["reason"]))
        text = text[end:].strip()
    return reasons


async def event_with(kube: KubeCluster, namespace: str, name: str, reason: str, seconds: float = 30) -> dict[str, Any]:
    """The first Event with *reason* about the object *name*, once posted (kopf posts in
    the background)."""

    async def posted() -> dict[str, Any] | None:
        return next((e for e in await events_of(kube, namespace, name) if e["reason"] == reason), None)

    return await eventually(posted, seconds=seconds, what=f"an Event {reason} about {namespace}/{name}")


async def bind_claim(kube: KubeCluster, namespace: str, name: str) -> None:
    """Mark the PersistentVolumeClaim *name* Bound through its status, as the volume binder
    of kube-controller-manager would (none runs here)."""
    status = {"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}}
    await kube.akubectl(
        "patch", "pvc", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
