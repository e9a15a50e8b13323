"""The Kubernetes objects of a pod sandbox, as plain dicts (pure: no API calls): a
PersistentVolumeClaim holding the workspace's files and a Pod mounting it at `/sandbox`.

Both carry the labels `app.kubernetes.io/name: memplane-sandbox`,
`app.kubernetes.io/managed-by: memplane`, `memplane.io/workspace: <workspace>` (and the
caller's). The Pod runs `sleep infinity` as uid/gid 1000 (fsGroup 1000, so the volume is
writable), without privilege escalation, with every capability dropped, the runtime's
seccomp profile, no ServiceAccount token and no service links: an agent's commands in it
cannot reach the Kubernetes API with credentials. An *owner* (the MemoryWorkspace)
becomes the Pod's controller ownerReference, so the Pod goes with its workspace; the
claim never gets one, so whether the files outlive the workspace stays the operator's
choice (reclaimPolicy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SANDBOX_ROOT = "/sandbox"
CONTAINER = "sandbox"
VOLUME = "files"
WORKSPACE_LABEL = "memplane.io/workspace"
SANDBOX_UID = 1000
BASE_LABELS = {"app.kubernetes.io/name": "memplane-sandbox", "app.kubernetes.io/managed-by": "memplane"}

Body = dict[str, Any]


def labels_of(workspace: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels of a workspace's objects: *extra*, then the base labels and the
    workspace label (which *extra* cannot override)."""
    return {**dict(extra or {}), **BASE_LABELS, WORKSPACE_LABEL: workspace}


def owner_reference(owner: Mapping[str, str]) -> Body:
    """A controller ownerReference to *owner* ({apiVersion, kind, name, uid}); KeyError
    naming the missing key otherwise."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def claim_body(
    name: str,
    namespace: str,
    workspace: str,
    *,
    storage: str = "1Gi",
    storage_class: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Body:
    """The PersistentVolumeClaim *namespace*/*name*: ReadWriteOnce, *storage* (a
    Kubernetes quantity), of *storage_class* (None: the cluster's default class)."""
    spec: Body = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels_of(workspace, labels)},
        "spec": spec,
    }


def pod_body(
    name: str,
    namespace: str,
    workspace: str,
    image: str,
    claim: str,
    *,
    resources: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    owner: Mapping[str, str] | None = None,
    runtime_class: str | None = None,
) -> Body:
    """The Pod *namespace*/*name*: one container `sandbox` from *image* running `sleep
    infinity` in `/sandbox`, where claim *claim* is mounted; *resources* is the
    container's `resources` ({requests, limits}); *runtime_class* its RuntimeClass (e.g.
    gVisor); *owner* see the module docstring."""
    container: Body = {
        "name": CONTAINER,
        "image": image,
        "command": ["sleep", "infinity"],
        "workingDir": SANDBOX_ROOT,
        "volumeMounts": [{"name": VOLUME, "mountPath": SANDBOX_ROOT}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if resources is not None:
        container["resources"] = dict(resources)
    spec: Body = {
        "containers": [container],
        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}}],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 5,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SANDBOX_UID,
            "runAsGroup": SANDBOX_UID,
            "fsGroup": SANDBOX_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    metadata: Body = {"name": name, "namespace": namespace, "labels": labels_of(workspace, labels)}
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
