"""The SandboxClass CRD (cluster-scoped, admin-owned, like a StorageClass): a kind of
sandbox offered to MemoryWorkspaces, its type's parameters checked by CEL rules; one
annotated `DEFAULT_CLASS_ANNOTATION` is the default."""

from __future__ import annotations

from typing import Any

from memplane_operator.crds.schema import (
    SANDBOX_TYPES,
    Schema,
    crd,
    duration,
    label_selector,
    object_,
    secret_key_ref,
    string,
)

DEFAULT_CLASS_ANNOTATION = "sandboxclass.memplane.io/is-default-class"


def _sandbox_class_spec() -> Schema:
    only_for = [
        {"rule": f"!has(self.{t}) || self.type == '{t}'", "message": f"is only for type {t}", "fieldPath": f".{t}"}
        for t in ("local", "pod", "docker", "e2b")
    ]
    needs = [
        {"rule": f"self.type != '{t}' || has(self.{t})", "message": f"is required for type {t}", "fieldPath": f".{t}"}
        for t in ("pod", "docker", "e2b")
    ]
    return object_(
        "A kind of sandbox an administrator offers to MemoryWorkspaces, like a StorageClass.",
        {
            "type": string(
                "none (no files), local (a PersistentVolumeClaim), pod (a Pod with a PVC), docker (a container "
                "over the Docker Engine API) or e2b (an E2B cloud sandbox).",
                enum=SANDBOX_TYPES,
                **{"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "type is immutable"}]},
            ),
            "local": object_(
                "Parameters of type local.",
                {
                    "storageClassName": string("StorageClass of the claim (unset: the cluster default)."),
                    "accessModes": {
                        "type": "array",
                        "description": "Access modes of the claim (default ReadWriteOnce).",
                        "items": string("An access mode.", enum=["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]),
                    },
                },
            ),
            "pod": object_(
                "Parameters of type pod.",
                {
                    "image": string("Image of the sandbox container.", minLength=1),
                    "storageClassName": string("StorageClass of the sandbox volume."),
                    "runtimeClassName": string("RuntimeClass of the Pod (e.g. gvisor)."),
                },
                required=["image"],
            ),
            "docker": object_(
                "Parameters of type docker.",
                {
                    "host": string("Docker Engine API endpoint, e.g. unix:///run/podman/podman.sock.", minLength=1),
                    "image": string("Image of the sandbox container.", minLength=1),
                    "network": string("Container network mode (default none: no network).", default="none"),
                },
                required=["host", "image"],
            ),
            "e2b": object_(
                "Parameters of type e2b.",
                {
                    "template": string("E2B template id.", minLength=1),
                    "apiKeySecretRef": secret_key_ref(
                        "The E2B API key: a Secret in the operator's namespace, never in a tenant's."
                    ),
                    "domain": string("E2B API domain (default e2b.app)."),
                },
                required=["template", "apiKeySecretRef"],
            ),
            "allowedNamespaces": label_selector("Namespaces whose workspaces may use this class (unset: all)."),
            "idleTimeout": duration(
                "Idle time after which a workspace's running sandbox is suspended, for workspaces that set "
                "no spec.sandbox.idleTimeout (unset: never). Types with compute only (docker, pod, e2b)."
            ),
            "syncInterval": duration(
                "How often the operator syncs each workspace's sandbox (its Memory/ view, both ways), for "
                "workspaces that set no spec.sandbox.syncInterval (unset: MEMPLANE_OPERATOR_SANDBOX_SYNC_SECONDS, "
                '30 s; "0s": never). Types docker, pod, e2b.'
            ),
        },
        required=["type"],
        **{"x-kubernetes-validations": only_for + needs},
    )


def sandbox_class_crd() -> dict[str, Any]:
    """The SandboxClass CRD (cluster-scoped, admin-owned)."""
    return crd(
        kind="SandboxClass",
        plural="sandboxclasses",
        short_names=["sbc"],
        scope="Cluster",
        description="A kind of sandbox offered to MemoryWorkspaces (cluster-scoped, like a StorageClass). Annotate "
        f'one with {DEFAULT_CLASS_ANNOTATION}: "true" to make it the default.',
        spec=_sandbox_class_spec(),
        status=None,
        columns=[
            {"name": "Type", "type": "string", "jsonPath": ".spec.type"},
            {
                "name": "Default",
                "type": "string",
                "jsonPath": ".metadata.annotations.sandboxclass\\.memplane\\.io/is-default-class",
            },
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )
