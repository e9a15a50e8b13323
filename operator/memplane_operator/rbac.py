"""The RBAC the operator needs, as one source (written to operator/config/rbac/ by
scripts/gen_manifests.py; the chart reuses it). Nothing more: no Deployment, no listing of
Pods or Secrets. pods/exec is there for the file sync of pod sandboxes (its files go as
tar over exec, as `kubectl cp`)."""

from __future__ import annotations

from typing import Any

from memplane_operator.crds import GROUP

OPERATOR_NAME = "memplane-operator"


def namespaced_rules() -> list[dict[str, Any]]:
    """Rules on objects inside the namespaces the operator serves (a Role per namespace in
    the chart's namespaced mode, part of the ClusterRole otherwise)."""
    return [
        # Its own resources: watched by kopf, patched for finalizers, annotations and status.
        {"apiGroups": [GROUP], "resources": ["memoryworkspaces"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [GROUP], "resources": ["memoryworkspaces/status"], "verbs": ["get", "patch", "update"]},
        # The credentials Secret and the sandbox volume of each workspace, by name only.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "create", "patch", "delete"]},
        # The Pod of a SandboxClass of type pod (by name; watched while one terminates).
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "create", "delete"]},
        # The file sync of a pod sandbox (memplane_operator.sync.passes): files as tar over exec
        # and the sync lock's mkdir. create is the exec itself; get, what API servers before
        # Kubernetes 1.30 check for the websocket upgrade (a GET) of pods/exec.
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        # The operator's Events about its objects (memplane_operator.events), posted by kopf.
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]


def own_namespace_rules() -> list[dict[str, Any]]:
    """Rules in the operator's own namespace: the Secrets a SandboxClass names (the E2B API
    key of spec.e2b.apiKeySecretRef), read by name. Covered by the ClusterRole when the
    operator serves the whole cluster; a Role of its own in the chart's namespaced mode."""
    return [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def cluster_rules() -> list[dict[str, Any]]:
    """Rules on cluster-scoped objects (always a ClusterRole)."""
    return [
        {"apiGroups": [GROUP], "resources": ["sandboxclasses"], "verbs": ["get", "list", "watch"]},
        # SandboxClass.spec.allowedNamespaces selects namespaces by label.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        # The StorageClass a local sandbox's claim asks for, by name: whether it binds on first consumer.
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]},
        # kopf notices CRDs installed or removed while it runs (read-only).
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get", "list", "watch"],
        },
    ]


def rules() -> list[dict[str, Any]]:
    """PolicyRules of the operator's ClusterRole when it serves the whole cluster."""
    return [*namespaced_rules(), *cluster_rules()]


def cluster_role() -> dict[str, Any]:
    """The operator's ClusterRole (bind it to its ServiceAccount with a ClusterRoleBinding)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": OPERATOR_NAME, "labels": {"app.kubernetes.io/part-of": "memplane"}},
        "rules": rules(),
    }
