"""Conversions between database rows / JSON snapshots and domain objects."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memplane.domain.models import Memory, MemoryType, Provenance, Scope

# Columns read for a Memory (never the embedding or the tsvector).
MEMORY_COLUMNS = (
    "m.id, m.user_id, m.agent_id, m.session_id, m.type, m.name, m.description, m.content, m.metadata,"
    " m.valid_from, m.valid_to, m.expires_at, m.source_session_id, m.source_message_ids, m.version,"
    " m.created_at, m.updated_at"
)


def memory_from_row(row: dict[str, Any]) -> Memory:
    """Build a `Memory` from a row selected with `MEMORY_COLUMNS`."""
    return Memory(
        id=str(row["id"]),
        scope=Scope(user_id=row["user_id"], agent_id=row["agent_id"], session_id=row["session_id"]),
        type=MemoryType(row["type"]),
        name=row["name"],
        description=row["description"],
        content=row["content"],
        metadata=row["metadata"],
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        expires_at=row["expires_at"],
        provenance=Provenance(session_id=row["source_session_id"], message_ids=tuple(row["source_message_ids"])),
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def snapshot(memory: Memory) -> dict[str, Any]:
    """JSON form of a memory for the history (before / after of an event)."""
    return {
        "id": memory.id,
        "user_id": memory.scope.user_id,
        "agent_id": memory.scope.agent_id,
        "session_id": memory.scope.session_id,
        "type": memory.type.value,
        "name": memory.name,
        "description": memory.description,
        "content": memory.content,
        "metadata": memory.metadata,
        "valid_from": _iso(memory.valid_from),
        "valid_to": _iso(memory.valid_to),
        "expires_at": _iso(memory.expires_at),
        "source_session_id": memory.provenance.session_id,
        "source_message_ids": list(memory.provenance.message_ids),
        "version": memory.version,
        "created_at": _iso(memory.created_at),
        "updated_at": _iso(memory.updated_at),
    }


def memory_from_snapshot(data: dict[str, Any] | None) -> Memory | None:
    """Inverse of `snapshot`; None stays None (absent or redacted)."""
    if data is None:
        return None
    valid_from = datetime.fromisoformat(data["valid_from"])
    created_at = datetime.fromisoformat(data["created_at"])
    updated_at = datetime.fromisoformat(data["updated_at"])
    return Memory(
        id=data["id"],
        scope=Scope(user_id=data["user_id"], agent_id=data["agent_id"], session_id=data["session_id"]),
        type=MemoryType(data["type"]),
        name=data["name"],
        description=data["description"],
        content=data["content"],
        metadata=data["metadata"],
        valid_from=valid_from,
        valid_to=_dt(data["valid_to"]),
        expires_at=_dt(data["expires_at"]),
        provenance=Provenance(session_id=data["source_session_id"], message_ids=tuple(data["source_message_ids"])),
        version=data["version"],
        created_at=created_at,
        updated_at=updated_at,
    )
