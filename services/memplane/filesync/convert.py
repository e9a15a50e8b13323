"""Memories read over the API in their domain form (what `memplane.mdview` renders), and
back: the `MemoryInput` of a memory file's fields."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from memplane.convert import memory_type_from_proto, opt_time, scope_from_proto, struct_to_dict, to_datetime
from memplane.domain.models import Memory, MemoryType, Provenance
from memplane.v1 import memory_pb2


def memory_from_proto(memory: memory_pb2.Memory) -> Memory:
    """The domain form of a memory read over the API."""
    return Memory(
        id=memory.id,
        scope=scope_from_proto(memory.scope),
        type=memory_type_from_proto(memory.type, "type", default=None),
        name=memory.name,
        description=memory.description,
        content=memory.content,
        metadata=struct_to_dict(memory.metadata),
        valid_from=to_datetime(memory.valid_from_time, "valid_from_time"),
        valid_to=opt_time(memory, "valid_to_time"),
        expires_at=opt_time(memory, "expire_time"),
        provenance=Provenance(memory.provenance.session_id, tuple(memory.provenance.message_ids)),
        version=memory.version,
        created_at=to_datetime(memory.create_time, "create_time"),
        updated_at=to_datetime(memory.update_time, "update_time"),
    )


def memory_input(
    *,
    content: str,
    type: MemoryType,
    name: str,
    description: str,
    metadata: dict[str, Any],
    scope: memory_pb2.Scope | None = None,
) -> memory_pb2.MemoryInput:
    """The `MemoryInput` of these fields (*scope* unset: the workspace's empty scope)."""
    struct = struct_pb2.Struct()
    struct.update(metadata)
    return memory_pb2.MemoryInput(
        content=content,
        type=memory_pb2.MemoryType.Value(f"MEMORY_TYPE_{type.value.upper()}"),
        name=name,
        description=description,
        metadata=struct,
        scope=scope,
    )
