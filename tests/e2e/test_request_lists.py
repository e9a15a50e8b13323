"""Every list a request carries is bounded (`LimitsSettings`): one entry over the limit is
INVALID_ARGUMENT with a BadRequest violation naming the field's path and the limit; a list
at the limit is accepted. Over real gRPC, through the SDK's typed errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.server.settings import LimitsSettings
from memplane.v1 import admin_pb2, compaction_pb2, filter_pb2, memory_pb2
from tests.fix_server import TestWorkspace
from tests.support import cond, fields, mem

LIMITS = LimitsSettings()
IN = filter_pb2.CONDITION_OPERATOR_IN
EQ = filter_pb2.CONDITION_OPERATOR_EQ
USER = memory_pb2.MEMORY_TYPE_USER

Call = Callable[[TestWorkspace, AsyncMemplaneClient, int], Awaitable[Any]]


def _in(n: int) -> filter_pb2.MetadataFilter:
    return cond("tag", IN, [f"t{i}" for i in range(n)])


async def search_in(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    return await ws.client.search("tags", filter=filter_pb2.MemoryFilter(metadata=_in(n)))


async def list_not_in(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    not_in = filter_pb2.MetadataFilter(**{"not": _in(n)})
    return await ws.client.list_memories(filter=filter_pb2.MemoryFilter(metadata=not_in))


async def list_eq_list(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    """A list compared whole by EQ counts its elements at every level: [[...n-1 values]] is n."""
    operand = [list(range(n - 1))]
    return await ws.client.list_memories(filter=filter_pb2.MemoryFilter(metadata=cond("tags", EQ, operand)))


async def list_types(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    return await ws.client.list_memories(filter=filter_pb2.MemoryFilter(types=[USER] * n))


async def add_metadata_keys(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    """n keys: n - 1 at the top, one nested (keys count at every level)."""
    metadata: dict[str, Any] = {f"k{i}": 0 for i in range(n - 2)}
    metadata["nested"] = {"inner": 0}
    return await ws.client.add_memories([mem("a memory with many attributes", metadata=metadata)])


async def add_message_ids(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    provenance = memory_pb2.Provenance(session_id="s", message_ids=[f"m{i}" for i in range(n)])
    return await ws.client.add_memories([mem("a fact from many turns", provenance=provenance)])


async def update_mask(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    [stored] = await ws.client.add_memories([mem("before the update")])
    return await ws.client.update_memory(stored.id, memory_pb2.MemoryInput(content="after"), ["content"] * n)


async def workspace_mask(ws: TestWorkspace, admin: AsyncMemplaneClient, n: int) -> Any:
    workspace = admin_pb2.Workspace(name=ws.name, labels={"team": "a"})
    return await admin.update_workspace(workspace, ["labels"] * n)


async def content_blocks(ws: TestWorkspace, _: AsyncMemplaneClient, n: int) -> Any:
    blocks = [compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=f"b{i}")) for i in range(n)]
    message = compaction_pb2.ContextMessage(role=memory_pb2.MESSAGE_ROLE_USER, content=blocks)
    return await ws.client.check_context([message])


CASES: list[tuple[str, Call, int, str]] = [
    ("IN operands", search_in, LIMITS.max_filter_values, "filter.metadata.condition.value"),
    ("NOT IN operands", list_not_in, LIMITS.max_filter_values, "filter.metadata.not.condition.value"),
    ("EQ list operand", list_eq_list, LIMITS.max_filter_values, "filter.metadata.condition.value"),
    ("filter types", list_types, LIMITS.max_enum_entries, "filter.types"),
    ("metadata keys", add_metadata_keys, LIMITS.max_metadata_keys, "memories[0].metadata"),
    ("provenance message ids", add_message_ids, LIMITS.max_batch_size, "memories[0].provenance.message_ids"),
    ("UpdateMemory update_mask paths", update_mask, LIMITS.max_enum_entries, "update_mask.paths"),
    ("UpdateWorkspace update_mask paths", workspace_mask, LIMITS.max_enum_entries, "update_mask.paths"),
    ("content blocks of a message", content_blocks, LIMITS.max_content_blocks, "messages[0].content"),
]


@pytest.mark.parametrize(("call", "limit", "field"), [pytest.param(c, n, f, id=i) for i, c, n, f in CASES])
async def test_a_list_over_its_limit_is_refused_naming_the_field_and_the_limit(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient, call: Call, limit: int, field: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await call(workspace, admin_client, limit + 1)
    assert fields(caught.value) == [field]
    [violation] = caught.value.violations
    assert f"the limit is {limit}" in violation.description
    assert str(limit + 1) in violation.description


@pytest.mark.parametrize(("call", "limit"), [pytest.param(c, n, id=i) for i, c, n, _ in CASES])
async def test_a_list_at_its_limit_is_accepted(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient, call: Call, limit: int
) -> None:
    await call(workspace, admin_client, limit)
