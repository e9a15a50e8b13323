"""The pod sandbox backend's lifecycle against a real kube-apiserver (tests/fix_kube.py):
the objects it makes (shapes, labels, owner), idempotency, suspend and destroy, readiness,
and the exec endpoint's refusal. No kubelet runs here, so no Pod ever runs: its Ready
status is written through the status subresource, as a kubelet would, where a test needs
it. The file I/O half runs in tests/contract (pod-io, on Podman); what is not run
anywhere here: the exec websocket through a kubelet to a running container, a Pod
becoming Ready by itself, a claim binding to a volume."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import kr8s.asyncio
import pytest

from memplane.errors import FailedPreconditionError
from memplane.sandbox import SandboxNotFoundError
from memplane.sandbox.errors import SandboxNotReadyError
from memplane.sandbox.pod import PodSandboxes
from tests.fix_kube import KubeCluster

IMAGE = "registry.example/memplane-sandbox:1"


@pytest.fixture
async def api(kube: KubeCluster) -> kr8s.asyncio.Api:
    return await kr8s.asyncio.api(kubeconfig=str(kube.kubeconfig))


def _get(kube: KubeCluster, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    found = kube.kubectl("get", "-n", namespace, kind, name, "-o", "json", "--ignore-not-found")
    return json.loads(found.stdout) if found.stdout.strip() else None


def runtime_class(kube: KubeCluster, namespace: str) -> str:
    """A RuntimeClass named after the test's namespace (cluster-scoped: it stays until the
    session's cluster goes)."""
    body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": namespace}, "handler": "runsc"}
    kube.kubectl("apply", "-f", "-", input=json.dumps(body))
    return namespace


def _workspace() -> str:
    return f"ws-{uuid.uuid4().hex[:8]}"


async def _set_ready(kube: KubeCluster, namespace: str, name: str, phase: str = "Running") -> None:
    """Write the Pod's status as a kubelet would (phase, Ready condition)."""
    ready = "True" if phase == "Running" else "False"
    status = {"status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}
    await kube.akubectl(
        "patch", "-n", namespace, "pod", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


async def test_provision_makes_the_claim_and_pod_of_the_documented_shape(
    kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api
) -> None:
    kube.kubectl("create", "configmap", "owner", "-n", k8s_namespace)
    owner_uid = kube.kubectl("get", "configmap", "owner", "-n", k8s_namespace, "-o", "jsonpath={.metadata.uid}").stdout
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}
    runtime = runtime_class(kube, k8s_namespace)
    backend = PodSandboxes(
        api, k8s_namespace, IMAGE, storage="2Gi", storage_class="fast", labels={"team": "a"}, owner=owner,
        resources={"limits": {"memory": "256Mi"}}, runtime_class=runtime,
    )  # fmt: skip
    workspace = _workspace()
    handle = await backend.provision(workspace)
    name = f"memplane-sandbox-{workspace}"
    assert (handle.backend, handle.workspace, handle.ref, handle.root) == ("pod", workspace, name, "/sandbox")

    labels = {
        "team": "a",
        "app.kubernetes.io/name": "memplane-sandbox",
        "app.kubernetes.io/managed-by": "memplane",
        "memplane.io/workspace": workspace,
    }
    claim = _get(kube, k8s_namespace, "pvc", name)
    assert claim is not None
    assert claim["metadata"]["labels"] == labels
    assert "ownerReferences" not in claim["metadata"]  # reclaimPolicy, not GC, decides the files' fate
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"]["storageClassName"] == "fast"

    pod = _get(kube, k8s_namespace, "pod", name)
    assert pod is not None
    assert pod["metadata"]["labels"] == labels
    (reference,) = pod["metadata"]["ownerReferences"]
    assert (reference["uid"], reference["controller"], reference["blockOwnerDeletion"]) == (owner_uid, True, True)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert (container["name"], container["image"], container["command"]) == ("sandbox", IMAGE, ["sleep", "infinity"])
    assert container["volumeMounts"] == [{"name": "files", "mountPath": "/sandbox"}]
    assert container["resources"]["limits"] == {"memory": "256Mi"}  # (requests defaulted to limits by the API)
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert spec["volumes"] == [{"name": "files", "persistentVolumeClaim": {"claimName": name}}]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["runtimeClassName"] == runtime
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["fsGroup"] == 1000


async def test_a_refused_pod_is_named(kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api) -> None:
    """Admission refuses a Pod of a RuntimeClass that does not exist: the error says so."""
    backend = PodSandboxes(api, k8s_namespace, IMAGE, runtime_class="no-such-runtime")
    with pytest.raises(FailedPreconditionError, match=r"cannot create the sandbox's Pod: .*no-such-runtime"):
        await backend.provision(_workspace())


async def test_provision_is_idempotent_across_calls_and_instances(
    kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api
) -> None:
    workspace = _workspace()
    one, two = PodSandboxes(api, k8s_namespace, IMAGE), PodSandboxes(api, k8s_namespace, IMAGE)
    handles = await asyncio.gather(*(b.provision(workspace) for b in (one, one, two, two)))
    assert len(set(handles)) == 1
    uid = _get(kube, k8s_namespace, "pod", handles[0].ref)["metadata"]["uid"]  # type: ignore[index]
    await one.provision(workspace)
    assert _get(kube, k8s_namespace, "pod", handles[0].ref)["metadata"]["uid"] == uid  # type: ignore[index]
    pods = kube.kubectl("get", "pods", "-n", k8s_namespace, "-l", f"memplane.io/workspace={workspace}", "-o", "name")
    assert pods.stdout.split() == [f"pod/{handles[0].ref}"]


async def test_suspend_deletes_the_pod_and_keeps_the_claim_destroy_deletes_both(
    kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api
) -> None:
    backend = PodSandboxes(api, k8s_namespace, IMAGE)
    handle = await backend.provision(_workspace())
    claim_uid = _get(kube, k8s_namespace, "pvc", handle.ref)["metadata"]["uid"]  # type: ignore[index]
    await backend.suspend(handle)
    await backend.suspend(handle)  # idempotent
    assert _get(kube, k8s_namespace, "pod", handle.ref) is None
    assert _get(kube, k8s_namespace, "pvc", handle.ref)["metadata"]["uid"] == claim_uid  # type: ignore[index]

    assert await backend.provision(handle.workspace) == handle  # resumed on the same claim
    assert _get(kube, k8s_namespace, "pod", handle.ref) is not None
    assert _get(kube, k8s_namespace, "pvc", handle.ref)["metadata"]["uid"] == claim_uid  # type: ignore[index]

    await backend.destroy(handle)
    await backend.destroy(handle)  # idempotent
    assert _get(kube, k8s_namespace, "pod", handle.ref) is None
    claim = _get(kube, k8s_namespace, "pvc", handle.ref)  # gone, or going (the pvc-protection finalizer)
    assert claim is None or "deletionTimestamp" in claim["metadata"]


async def test_the_owner_s_deletion_collects_the_pod_not_the_claim(
    kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api
) -> None:
    kube.kubectl("create", "configmap", "owner", "-n", k8s_namespace)
    uid = kube.kubectl("get", "configmap", "owner", "-n", k8s_namespace, "-o", "jsonpath={.metadata.uid}").stdout
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    handle = await PodSandboxes(api, k8s_namespace, IMAGE, owner=owner).provision(_workspace())
    await kube.akubectl("delete", "configmap", "owner", "-n", k8s_namespace)
    await kube.akubectl("wait", "--for=delete", f"pod/{handle.ref}", "-n", k8s_namespace, "--timeout=60s")
    assert _get(kube, k8s_namespace, "pvc", handle.ref) is not None


async def test_ensure_waits_for_ready_and_names_what_is_missing(
    kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api
) -> None:
    quick = PodSandboxes(api, k8s_namespace, IMAGE, ready_timeout_seconds=0.5)
    workspace = _workspace()
    with pytest.raises(SandboxNotReadyError, match=rf"sandbox '{workspace}' is not ready: pod \S+ is Pending"):
        await quick.ensure(workspace)
    handle = await quick.provision(workspace)
    assert await quick.ready(handle) is False

    patient = PodSandboxes(api, k8s_namespace, IMAGE, ready_timeout_seconds=60.0)
    waiting = asyncio.create_task(patient.ensure(workspace))
    await _set_ready(kube, k8s_namespace, handle.ref)  # what the kubelet would report
    assert await waiting == handle
    assert await patient.ready(handle) is True


async def test_a_failed_pod_is_replaced(kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api) -> None:
    backend = PodSandboxes(api, k8s_namespace, IMAGE)
    handle = await backend.provision(_workspace())
    uid = _get(kube, k8s_namespace, "pod", handle.ref)["metadata"]["uid"]  # type: ignore[index]
    await _set_ready(kube, k8s_namespace, handle.ref, phase="Failed")  # e.g. evicted
    await backend.provision(handle.workspace)
    replaced = _get(kube, k8s_namespace, "pod", handle.ref)
    assert replaced is not None
    assert replaced["metadata"]["uid"] != uid


async def test_exec_reaches_the_api_server_s_exec_endpoint(
    kube: KubeCluster, k8s_namespace: str, api: kr8s.asyncio.Api
) -> None:
    """The websocket upgrade is made and refused by the API server: a Pod with no node
    has no kubelet to exec in (SandboxNotReadyError, saying the Pod is Pending and the
    refusal); a deleted Pod is SandboxNotFoundError."""
    backend = PodSandboxes(api, k8s_namespace, IMAGE)
    handle = await backend.provision(_workspace())
    with pytest.raises(SandboxNotReadyError, match=r"is Pending.*HTTP 400"):
        await backend.exec(handle, ["true"])
    await backend.suspend(handle)
    with pytest.raises(SandboxNotFoundError):
        await backend.exec(handle, ["true"])


async def test_the_documented_rbac_is_enough(
    kube: KubeCluster, k8s_namespace: str, tmp_path: Path, api: kr8s.asyncio.Api
) -> None:
    """A ServiceAccount with only the verbs PodSandboxes' docstring lists provisions,
    waits for Ready (a watch), suspends and destroys."""
    ns = ["-n", k8s_namespace]
    kube.kubectl("create", "serviceaccount", "sandboxer", *ns)
    kube.kubectl("create", "role", "pods", "--verb=get,watch,create,delete", "--resource=pods", *ns)
    kube.kubectl("create", "role", "exec", "--verb=create,get", "--resource=pods/exec", *ns)
    kube.kubectl("create", "role", "claims", "--verb=get,create,delete", "--resource=persistentvolumeclaims", *ns)
    for role in ("pods", "exec", "claims"):
        kube.kubectl(
            "create", "rolebinding", role, f"--role={role}", f"--serviceaccount={k8s_namespace}:sandboxer", *ns
        )
    token = kube.kubectl("create", "token", "sandboxer", *ns).stdout.strip()
    config = kube.kubeconfig_for_token(token, tmp_path / "sandboxer.kubeconfig", k8s_namespace)
    limited = await kr8s.asyncio.api(kubeconfig=str(config))
    backend = PodSandboxes(limited, k8s_namespace, IMAGE, ready_timeout_seconds=60.0)
    workspace = _workspace()
    handle = await backend.provision(workspace)
    waiting = asyncio.create_task(backend.ensure(workspace))
    await _set_ready(kube, k8s_namespace, handle.ref)
    assert await waiting == handle
    await backend.suspend(handle)
    await backend.destroy(handle)
    assert _get(kube, k8s_namespace, "pod", handle.ref) is None
