"""The generated `memplane.v1` messages as the JSON the page reads: plain objects with
snake_case keys, times as ISO 8601 UTC strings ("" when unset), enums as lower-case
words ("user", "update"), durations in milliseconds. Memory text passes through
unchanged: the page sets it as text, never as HTML."""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2

from memplane.v1 import memory_pb2, retrieval_pb2, writeback_pb2

JsonObject = dict[str, Any]

MEMORY_TYPES = ("user", "feedback", "project", "reference", "procedural", "tool", "episodic")


def _time(message: Any, field: str) -> str:
    if not message.HasField(field):
        return ""
    ts: timestamp_pb2.Timestamp = getattr(message, field)
    return ts.ToJsonString()


def _ms(duration: duration_pb2.Duration) -> float:
    return duration.seconds * 1000.0 + duration.nanos / 1e6


def _struct(value: struct_pb2.Struct) -> JsonObject:
    out: JsonObject = json_format.MessageToDict(value)
    return out


def memory_type(value: int) -> str:
    """ "user", "feedback", ... for a `MemoryType` value; "" for UNSPECIFIED."""
    name: str = memory_pb2.MemoryType.Name(value)  # type: ignore[arg-type]
    return "" if value == 0 else name.removeprefix("MEMORY_TYPE_").lower()


def memory_type_value(word: str, field: str) -> int:
    """The `MemoryType` value of *word* ("user", ...). Raises `ValueError` naming
    *field* for a word that is not a memory type."""
    if word not in MEMORY_TYPES:
        raise ValueError(f"{field}: {word!r} is not a memory type ({', '.join(MEMORY_TYPES)})")
    return int(memory_pb2.MemoryType.Value(f"MEMORY_TYPE_{word.upper()}"))


def memory(m: memory_pb2.Memory) -> JsonObject:
    """A memory: id, scope, type, name, description, content, metadata, validity,
    expiry, provenance, version and timestamps."""
    return {
        "id": m.id,
        "scope": {"user_id": m.scope.user_id, "agent_id": m.scope.agent_id, "session_id": m.scope.session_id},
        "type": memory_type(m.type),
        "name": m.name,
        "description": m.description,
        "content": m.content,
        "metadata": _struct(m.metadata),
        "valid_from_time": _time(m, "valid_from_time"),
        "valid_to_time": _time(m, "valid_to_time"),
        "expire_time": _time(m, "expire_time"),
        "provenance": {"session_id": m.provenance.session_id, "message_ids": list(m.provenance.message_ids)},
        "version": m.version,
        "create_time": _time(m, "create_time"),
        "update_time": _time(m, "update_time"),
    }


def event(e: memory_pb2.MemoryEvent) -> JsonObject:
    """A history event: kind ("add", "update", "delete", "noop"), before and after
    (null when absent), actor, request id, time and the decision (extraction's reason)."""
    kind: str = memory_pb2.EventKind.Name(e.kind)
    return {
        "id": e.id,
        "kind": kind.removeprefix("EVENT_KIND_").lower(),
        "before": memory(e.before) if e.HasField("before") else None,
        "after": memory(e.after) if e.HasField("after") else None,
        "actor": e.actor,
        "request_id": e.request_id,
        "create_time": _time(e, "create_time"),
        "decision": _struct(e.decision),
    }


def _signal(s: retrieval_pb2.SignalScore, present: bool) -> JsonObject | None:
    if not present:
        return None
    return {"score": s.score, "normalized_score": s.normalized_score, "rank": s.rank}


def hit(h: retrieval_pb2.SearchHit) -> JsonObject:
    """A search hit with its explanation: fused score, relevance (and its signals),
    each leg's score and rank (null when the leg did not retrieve it), boosts, context."""
    b = h.boosts
    return {
        "memory": memory(h.memory),
        "score": h.score,
        "relevance": h.relevance,
        "relevance_signals": json_format.MessageToDict(
            h.relevance_signals, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        ),
        "vector": _signal(h.vector, h.HasField("vector")),
        "lexical": _signal(h.lexical, h.HasField("lexical")),
        "rerank": _signal(h.rerank, h.HasField("rerank")),
        "query_index": h.query_index,
        "boosts": {
            "neighbour": b.neighbour,
            "speaker": b.speaker,
            "time": b.time,
            "phrase": b.phrase,
            "when": b.when,
        },
        "context": [
            {"offset": t.offset, "message_id": t.message_id, "name": t.name, "content": t.content, "tokens": t.tokens}
            for t in h.context
        ],
    }


def search_reply(r: retrieval_pb2.SearchMemoriesResponse) -> JsonObject:
    """Hits, best first, and the timing in milliseconds (embedding, database, rerank, total)."""
    t = r.timing
    status: str = retrieval_pb2.RerankStatus.Name(r.rerank_status)
    return {
        "hits": [hit(h) for h in r.hits],
        "timing_ms": {
            "embedding": _ms(t.embedding_duration),
            "database": _ms(t.database_duration),
            "rerank": _ms(t.rerank_duration),
            "total": _ms(t.total_duration),
        },
        "rerank_status": status.removeprefix("RERANK_STATUS_").lower(),
        "rerank_note": r.rerank_note,
    }


def erasure_receipt(r: writeback_pb2.DeleteMemoriesByScopeResponse, scope: JsonObject, time: str) -> JsonObject:
    """What an erasure removed: memories and transcript messages, of which scope, when."""
    return {
        "scope": scope,
        "deleted_count": r.deleted_count,
        "deleted_message_count": r.deleted_message_count,
        "time": time,
    }
