"""Restoring a deleted memory: its history's last DELETE event holds the memory as it was
(`before`), which is stored again with AddMemories — a new id and version 1, every other
field as it was. `memplane restore` (a memory file deleted in a sandbox by mistake: the
next sync renders it again) and the console's restore both use it."""

from __future__ import annotations

from memplane.client.aio import AsyncMemplaneClient
from memplane.client.export_format import memory_input
from memplane.errors import NotFoundError
from memplane.v1 import memory_pb2


async def restore_deleted(client: AsyncMemplaneClient, memory_id: str) -> memory_pb2.Memory:
    """Store the deleted memory *memory_id* of the key's workspace again; returns the new
    memory. Raises `NotFoundError` when its history holds no DELETE event with the memory
    (never deleted, or erased by scope: that keeps no content)."""
    events = await client.list_memory_events(memory_id)
    deletes = [e for e in events if e.kind == memory_pb2.EVENT_KIND_DELETE and e.HasField("before")]
    if not deletes:
        raise NotFoundError("deleted memory", memory_id)
    return (await client.add_memories([memory_input(deletes[-1].before)]))[0]
