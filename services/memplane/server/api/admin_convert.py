"""AdminService messages to and from domain objects: workspaces with their quotas,
retention and labels; API keys."""

from __future__ import annotations

from google.protobuf import duration_pb2

from memplane.convert import MEMORY_TYPE_VALUES, MEMORY_TYPES, timestamp
from memplane.domain.models import ApiKeyRecord, MemoryType, Quotas, Retention, Workspace
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.v1 import admin_pb2


def quotas_from_proto(quotas: admin_pb2.WorkspaceQuotas) -> Quotas:
    """The domain quotas (values are checked by `memplane.server.admin.policy`)."""
    return Quotas(
        max_memories=quotas.max_memories,
        max_bytes=quotas.max_bytes,
        max_requests_per_second=quotas.max_requests_per_second,
        max_embedding_tokens_per_day=quotas.max_embedding_tokens_per_day,
        scheduling_weight=quotas.scheduling_weight,
    )


def _seconds(duration: duration_pb2.Duration, field: str, violations: list[FieldViolation]) -> int:
    if duration.nanos or duration.seconds < 0:
        violations.append(FieldViolation(field, "must be a whole, non-negative number of seconds"))
    return int(duration.seconds)


def retention_from_proto(retention: admin_pb2.RetentionPolicy, field: str = "retention") -> Retention:
    """The domain retention. Raises `InvalidArgumentError` for fractional or negative
    durations, an unspecified or unknown type, or two rules for one type (bounds are
    checked by `memplane.server.admin.policy`)."""
    violations: list[FieldViolation] = []
    default = _seconds(retention.default_ttl, f"{field}.default_ttl", violations)
    rules: dict[MemoryType, int] = {}
    for i, rule in enumerate(retention.rules):
        memory_type = MEMORY_TYPES.get(rule.type)
        if memory_type is None:
            violations.append(FieldViolation(f"{field}.rules[{i}].type", "must be a memory type (not UNSPECIFIED)"))
            continue
        if memory_type in rules:
            violations.append(FieldViolation(f"{field}.rules[{i}].type", f"repeats a rule for {memory_type.value!r}"))
        if not rule.HasField("ttl"):
            violations.append(FieldViolation(f"{field}.rules[{i}].ttl", "is required"))
        rules[memory_type] = _seconds(rule.ttl, f"{field}.rules[{i}].ttl", violations)
    if violations:
        raise InvalidArgumentError(violations)
    return Retention(default_ttl_seconds=default, type_ttl_seconds=rules)


def retention_to_proto(retention: Retention) -> admin_pb2.RetentionPolicy:
    """The proto retention; rules in memory-type order."""
    out = admin_pb2.RetentionPolicy()
    if retention.default_ttl_seconds:
        out.default_ttl.seconds = retention.default_ttl_seconds
    for memory_type in MemoryType:
        if memory_type in retention.type_ttl_seconds:
            rule = out.rules.add(type=MEMORY_TYPE_VALUES[memory_type])
            rule.ttl.seconds = retention.type_ttl_seconds[memory_type]
    return out


def workspace_to_proto(workspace: Workspace) -> admin_pb2.Workspace:
    """The proto workspace."""
    q = workspace.quotas
    return admin_pb2.Workspace(
        name=workspace.name,
        embedding_model=workspace.embedding_model,
        embedding_dimensions=workspace.embedding_dimensions,
        token_encoding=workspace.token_encoding,
        create_time=timestamp(workspace.created_at),
        update_time=timestamp(workspace.updated_at),
        quotas=admin_pb2.WorkspaceQuotas(
            max_memories=q.max_memories,
            max_bytes=q.max_bytes,
            max_requests_per_second=q.max_requests_per_second,
            max_embedding_tokens_per_day=q.max_embedding_tokens_per_day,
            scheduling_weight=q.scheduling_weight,
        ),
        retention=retention_to_proto(workspace.retention),
        labels=workspace.labels,
        placement=workspace.placement,
    )


def api_key_to_proto(record: ApiKeyRecord) -> admin_pb2.ApiKey:
    """The proto key (never a secret: the store keeps hashes only)."""
    return admin_pb2.ApiKey(
        key_id=record.key_id,
        workspace=record.workspace_name or "",
        display_name=record.display_name,
        create_time=timestamp(record.created_at),
        revoke_time=timestamp(record.revoked_at),
    )
