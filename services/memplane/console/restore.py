"""Restoring from a memory's history: a deleted memory stored again from the `before` of
its last DELETE event (the same as `memplane restore`, which the file sync owns)."""

from __future__ import annotations

from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError
from memplane.v1 import memory_pb2


async def restore_deleted(client: AsyncMemplaneClient, memory_id: str) -> memory_pb2.Memory:
    """Store the deleted memory *memory_id* again; returns the new memory (a new id, version 1).
    Raises `NotFoundError` when its history holds no DELETE event with the memory (never
    deleted, erased by scope, or of another workspace)."""
    events = await client.list_memory_events(memory_id)
    deletes = [e for e in events if e.kind == memory_pb2.EVENT_KIND_DELETE and e.HasField("before")]
    if not deletes:
        raise NotFoundError("deleted memory", memory_id)
    before = deletes[-1].before
    item = memory_pb2.MemoryInput(
        content=before.content,
        scope=before.scope,
        type=before.type,
        name=before.name,
        description=before.description,
        metadata=before.metadata,
        provenance=before.provenance,
    )
    for name in ("valid_from_time", "valid_to_time", "expire_time"):
        if before.HasField(name):
            getattr(item, name).CopyFrom(getattr(before, name))
    [stored] = await client.add_memories([item])
    return stored
