"""mem0's dicts to and from memplane's messages: scopes, messages, filters, result items
and history rows, as mem0 2.2.1 builds them (`mem0/memory/main.py`: `_build_filters_and_metadata`,
`_add_to_vector_store`, `_search_vector_store`, `mem0/memory/storage.py`: `get_history`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from memplane.compat.mem0.errors import ValidationError
from memplane.v1 import filter_pb2, memory_pb2

ENTITY_KEYS = ("user_id", "agent_id", "run_id")
# Keys mem0 keeps beside a memory's text and lifts out of its metadata in every result.
MESSAGE_KEYS = ("actor_id", "role")
LOGICAL_KEYS = ("AND", "OR", "NOT")
EVENT_NAMES = {
    memory_pb2.EVENT_KIND_ADD: "ADD",
    memory_pb2.EVENT_KIND_UPDATE: "UPDATE",
    memory_pb2.EVENT_KIND_DELETE: "DELETE",
    memory_pb2.EVENT_KIND_NOOP: "NOOP",
}
_OPERATORS = {
    "eq": filter_pb2.CONDITION_OPERATOR_EQ,
    "ne": filter_pb2.CONDITION_OPERATOR_NE,
    "gt": filter_pb2.CONDITION_OPERATOR_GT,
    "gte": filter_pb2.CONDITION_OPERATOR_GTE,
    "lt": filter_pb2.CONDITION_OPERATOR_LT,
    "lte": filter_pb2.CONDITION_OPERATOR_LTE,
    "in": filter_pb2.CONDITION_OPERATOR_IN,
    "contains": filter_pb2.CONDITION_OPERATOR_CONTAINS,
}


def entity_id(value: Any, name: str) -> str:
    """*value* as mem0 takes an entity id: None → "", anything else str()-ed and stripped.
    Raises `ValidationError` for an empty id or one with whitespace inside (mem0's rules)."""
    if value is None:
        return ""
    text = str(value).strip()
    if not text:
        raise ValidationError(f"Invalid {name}: cannot be empty or whitespace-only. Provide a valid identifier.")
    if any(c.isspace() for c in text):
        raise ValidationError(f"Invalid {name}: cannot contain whitespace. Provide a valid identifier without spaces.")
    return text


def scope_of(user_id: Any = None, agent_id: Any = None, run_id: Any = None, *, required: str = "") -> memory_pb2.Scope:
    """The memplane scope of mem0's entity ids (run_id → session_id). With *required*
    (the method's name), raises `ValidationError` when all three are missing, as mem0 does."""
    scope = memory_pb2.Scope(
        user_id=entity_id(user_id, "user_id"),
        agent_id=entity_id(agent_id, "agent_id"),
        session_id=entity_id(run_id, "run_id"),
    )
    if required and not (scope.user_id or scope.agent_id or scope.session_id):
        raise ValidationError(f"{required}: at least one of 'user_id', 'agent_id', or 'run_id' must be provided.")
    return scope


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """mem0's accepted inputs as a list of message dicts: a str is one user message, a
    dict one message, a list is kept. Raises `ValidationError` for anything else."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, dict):
        return [messages]
    if isinstance(messages, list):
        return messages
    raise ValidationError(f"messages must be str, dict, or list[dict], got {type(messages).__name__}")


def message_text(content: Any) -> str:
    """The text of a message's content: a str, or the text parts of an OpenAI-style list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "\n".join(p for p in parts if p)
    return ""


def user_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """*metadata* without the identity keys mem0 also strips (user_id, agent_id, run_id,
    actor_id: the scope is set by the entity arguments, never by metadata)."""
    return {k: v for k, v in (metadata or {}).items() if k not in (*ENTITY_KEYS, "actor_id")}


def struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    """A protobuf Struct of a JSON-like mapping. Raises `ValidationError` for a value JSON
    cannot hold."""
    out = struct_pb2.Struct()
    try:
        out.update(dict(values))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"metadata: {exc}") from exc
    return out


def _plain(value: Any) -> Any:
    """JSON numbers come back from a Struct as floats; whole ones are given back as ints
    (mem0 hands back what it was given, and 3 is far likelier than 3.0)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def expiration_date(value: Any) -> str | None:
    """*value* as mem0's `_normalize_expiration_date`: None, a `date`/`datetime` or a
    "YYYY-MM-DD" string, as "YYYY-MM-DD" (None stays None). Raises `ValidationError` (a
    ValueError, with mem0's message) for anything else."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError as exc:
            raise ValidationError("expiration_date must be a valid date in YYYY-MM-DD format.") from exc
    raise ValidationError("expiration_date must be a date string in YYYY-MM-DD format.")


def expire_time(day: str) -> timestamp_pb2.Timestamp:
    """memplane's expire_time of mem0's expiration date *day* ("YYYY-MM-DD"): midnight UTC
    at the end of that day. mem0 counts a memory expired once its date is before today
    (UTC), so it stays visible for the whole of its last day, as here."""
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(datetime.combine(date.fromisoformat(day) + timedelta(days=1), time(), tzinfo=UTC))
    return out


def _expiration_date_of(ts: timestamp_pb2.Timestamp) -> str:
    """The inverse of `expire_time`: the last UTC day a memory expiring at *ts* is
    current (the day before a midnight; the day itself for any other moment, e.g. an
    expiry a retention policy gave)."""
    return (ts.ToDatetime(tzinfo=UTC) - timedelta(microseconds=1)).date().isoformat()


def _iso(ts: timestamp_pb2.Timestamp) -> str | None:
    """mem0's timestamps: ISO 8601 with the UTC offset ("2026-12-02T03:27:07.123456+00:00")."""
    if not ts.seconds and not ts.nanos:
        return None
    return ts.ToDatetime(tzinfo=UTC).isoformat()


def memory_item(memory: memory_pb2.Memory, *, score: float | None = None, with_score: bool = True) -> dict[str, Any]:
    """A memory as mem0 returns it (`MemoryItem.model_dump()` plus the promoted keys): id,
    memory, hash (MD5 of the text, as mem0's), metadata (None when empty), score (search;
    None from get; absent from get_all), created_at, updated_at, then user_id, agent_id,
    run_id, actor_id, role, expiration_date ("YYYY-MM-DD", from memplane's expire_time)
    when set."""
    metadata = _plain(json_format.MessageToDict(memory.metadata)) if memory.HasField("metadata") else {}
    item: dict[str, Any] = {
        "id": memory.id,
        "memory": memory.content,
        "hash": hashlib.md5(memory.content.encode()).hexdigest(),  # noqa: S324 - mem0's content hash, not security
        "metadata": None,
        "score": score,
        "created_at": _iso(memory.create_time),
        "updated_at": _iso(memory.update_time),
    }
    if not with_score:
        del item["score"]
    for key, value in (("user_id", memory.scope.user_id), ("agent_id", memory.scope.agent_id)):
        if value:
            item[key] = value
    if memory.scope.session_id:
        item["run_id"] = memory.scope.session_id
    for key in MESSAGE_KEYS:
        if key in metadata:
            item[key] = metadata.pop(key)
    if memory.HasField("expire_time"):
        item["expiration_date"] = _expiration_date_of(memory.expire_time)
    if metadata:
        item["metadata"] = metadata
    return item


def history_row(event: memory_pb2.MemoryEvent) -> dict[str, Any]:
    """One memory event as a row of mem0's history table: id, memory_id, old_memory,
    new_memory, event, created_at (the memory's), updated_at (the event's), is_deleted,
    actor_id, role."""
    memory = event.after if event.HasField("after") else event.before
    metadata = json_format.MessageToDict(memory.metadata) if memory.HasField("metadata") else {}
    return {
        "id": str(event.id),
        "memory_id": event.memory_id,
        "old_memory": event.before.content if event.HasField("before") else None,
        "new_memory": event.after.content if event.HasField("after") else None,
        "event": EVENT_NAMES.get(event.kind, "NOOP"),
        "created_at": _iso(memory.create_time) or _iso(event.create_time),
        "updated_at": _iso(event.create_time),
        "is_deleted": event.kind == memory_pb2.EVENT_KIND_DELETE,
        "actor_id": metadata.get("actor_id"),
        "role": metadata.get("role"),
    }


def memory_filter(
    filters: Mapping[str, Any] | None, scope: memory_pb2.Scope, *, method: str
) -> filter_pb2.MemoryFilter:
    """mem0's `filters` dict (plus the top-level entity ids already in *scope*) as a
    memplane filter: user_id / agent_id / run_id select the scope; any other key is a
    metadata condition — a plain value (equals), "*" (the key exists), or an operator dict
    {"eq"|"ne"|"gt"|"gte"|"lt"|"lte"|"in"|"nin"|"contains": value}; "AND" / "OR" / "NOT"
    take lists of such dicts. Raises `ValidationError` without any entity id (mem0 requires
    one) or for an operator memplane lacks ("icontains")."""
    rest = dict(filters or {})
    given = {key: rest.pop(key, None) for key in ENTITY_KEYS}  # 0 is the id "0", as in mem0
    merged = scope_of(
        scope.user_id or None if given["user_id"] is None else given["user_id"],
        scope.agent_id or None if given["agent_id"] is None else given["agent_id"],
        scope.session_id or None if given["run_id"] is None else given["run_id"],
    )
    if not (merged.user_id or merged.agent_id or merged.session_id):
        raise ValidationError(
            f"{method}: filters must contain at least one of: user_id, agent_id, run_id. "
            "Example: filters={'user_id': 'u1'}"
        )
    result = filter_pb2.MemoryFilter(user_id=merged.user_id, agent_id=merged.agent_id, session_id=merged.session_id)
    if rest:
        result.metadata.CopyFrom(_metadata_filter(rest))
    return result


def _metadata_filter(filters: Mapping[str, Any]) -> filter_pb2.MetadataFilter:
    parts: list[filter_pb2.MetadataFilter] = []
    for key, value in filters.items():
        if key in LOGICAL_KEYS:
            items = value if isinstance(value, list) else [value]
            subs = [_metadata_filter(v) for v in items if isinstance(v, Mapping)]
            if key == "NOT":
                parts += [_negate(s) for s in subs]
            else:
                group = filter_pb2.MetadataFilterList(filters=subs)
                parts.append(
                    filter_pb2.MetadataFilter(all=group) if key == "AND" else filter_pb2.MetadataFilter(any=group)
                )
        elif key in ENTITY_KEYS:
            raise ValidationError(f"filters: {key} is a scope, not metadata: give it at the top level of filters")
        else:
            parts.append(_condition(key, value))
    return parts[0] if len(parts) == 1 else filter_pb2.MetadataFilter(all=filter_pb2.MetadataFilterList(filters=parts))


def _condition(key: str, value: Any) -> filter_pb2.MetadataFilter:
    if value == "*":
        return _leaf(key, filter_pb2.CONDITION_OPERATOR_EXISTS, None)
    if not isinstance(value, Mapping):
        return _leaf(key, filter_pb2.CONDITION_OPERATOR_EQ, value)
    parts = []
    for op, operand in value.items():
        if op == "nin":
            parts.append(_negate(_leaf(key, filter_pb2.CONDITION_OPERATOR_IN, operand)))
        elif op in _OPERATORS:
            parts.append(_leaf(key, _OPERATORS[op], operand))
        else:
            raise ValidationError(f"filters: operator {op!r} on {key!r} has no memplane counterpart")
    return parts[0] if len(parts) == 1 else filter_pb2.MetadataFilter(all=filter_pb2.MetadataFilterList(filters=parts))


def _negate(inner: filter_pb2.MetadataFilter) -> filter_pb2.MetadataFilter:
    out = filter_pb2.MetadataFilter()
    getattr(out, "not").CopyFrom(inner)  # `not` is a Python keyword
    return out


def _leaf(key: str, operator: filter_pb2.ConditionOperator.ValueType, value: Any) -> filter_pb2.MetadataFilter:
    condition = filter_pb2.MetadataCondition(key=key, operator=operator)
    if value is not None:
        wrapped = struct_pb2.Value()
        try:
            json_format.ParseDict(value, wrapped)
        except json_format.ParseError as exc:
            raise ValidationError(f"filters: {key}: {exc}") from exc
        condition.value.CopyFrom(wrapped)
    return filter_pb2.MetadataFilter(condition=condition)
