"""The vocabulary memplane's CRDs are written in: structural OpenAPI v3 schemas (every
field typed, with a description), the patterns the API server checks strings against, and
the CustomResourceDefinition around a kind's spec and status (`crd`). The kinds:
`memplane_operator.crds.memory_workspace`, `memplane_operator.crds.sandbox_class`."""

from __future__ import annotations

from typing import Any

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
SANDBOX_TYPES = ["none", "local", "pod", "docker", "e2b"]


def string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def integer(description: str, *, minimum: int = 0, maximum: int | None = None, fmt: str = "int64") -> Schema:
    schema: Schema = {"type": "integer", "format": fmt, "minimum": minimum, "description": description}
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def object_(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def duration(description: str, **extra: Any) -> Schema:
    return string(
        description + ' Whole d, h, m, s units: "90d", "1h30m".', pattern=DURATION_PATTERN, maxLength=32, **extra
    )


def quantity(description: str) -> Schema:
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


def secret_key_ref(description: str) -> Schema:
    return object_(
        description,
        {
            "name": string("Name of the Secret.", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN),
            "key": string("Key in the Secret's data.", maxLength=253, minLength=1),
        },
        required=["name", "key"],
    )


def label_selector(description: str) -> Schema:
    return object_(
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
                "items": object_(
                    "One requirement.",
                    {
                        "key": string("Label key.", minLength=1),
                        "operator": string("How the values apply.", enum=["In", "NotIn", "Exists", "DoesNotExist"]),
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                    required=["key", "operator"],
                ),
            },
        },
        **{"x-kubernetes-map-type": "atomic"},
    )


def condition() -> Schema:
    """metav1.Condition, as Kubernetes API conventions fix it."""
    return object_(
        "One aspect of the workspace's state.",
        {
            "type": string("Ready, DatabaseReady, CredentialsReady, SandboxReady, QuotaExceeded or Conflict."),
            "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": string("CamelCase machine-readable reason.", maxLength=1024),
            "message": string("Human-readable details.", maxLength=32768),
            "lastTransitionTime": string("When the status last changed.", format="date-time"),
            "observedGeneration": integer("The metadata.generation the condition was computed for."),
        },
        required=["type", "status", "lastTransitionTime", "reason"],
    )


def crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    scope: str,
    description: str,
    spec: Schema,
    status: Schema | None,
    columns: list[Schema],
    rules: list[Schema] | None = None,
) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind of group `GROUP`, served and stored at
    `VERSION`: *spec* required, *status* (if any) a subresource, *columns* for `kubectl get`,
    *rules* CEL validations of the whole object (a rule that reads both spec and status)."""
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
            **({"x-kubernetes-validations": rules} if rules else {}),
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
