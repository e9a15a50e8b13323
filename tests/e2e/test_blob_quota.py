"""Stored tool outputs count against the workspace's `max_bytes` quota (with its memory
text): GetWorkspaceUsage reports their bytes, a CompactToolResults whose blob would pass
the quota is RESOURCE_EXHAUSTED with a QuotaFailure naming max_bytes and stores nothing,
and the bytes are released when a blob is erased or expires. Over real gRPC."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import duration_pb2

from memplane.client import AsyncMemplaneClient
from memplane.errors import QuotaExceededError
from memplane.v1 import admin_pb2, compaction_pb2, memory_pb2
from tests.fix_server import WorkspaceFactory
from tests.support import mem, text_message, tool_call, tool_output, unit_vectors, workspace_blob_count

KB = 1024
SCOPE = memory_pb2.Scope(user_id="u", session_id="s")


def conversation(output: str) -> list[compaction_pb2.ContextMessage]:
    return [text_message("user", "read the log"), tool_call("c1", "read_log"), tool_output("c1", output)]


def limits(retention_seconds: int = 3600) -> compaction_pb2.ToolResultLimits:
    """Cut every output past 1 KiB (so it is stored), kept *retention_seconds*."""
    return compaction_pb2.ToolResultLimits(
        recent_max_bytes=KB, old_max_bytes=KB, retention=duration_pb2.Duration(seconds=retention_seconds)
    )


def log(size: int, tag: str) -> str:
    line = f"{tag} 0123456789 abcdefghij 处理\n"
    return (line * (size // len(line.encode()) + 1))[:size]


async def test_a_blob_past_max_bytes_is_refused_naming_the_quota_and_stores_nothing(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient, pg_dsn: str
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_bytes=2000))
    with pytest.raises(QuotaExceededError) as caught:
        await ws.client.compact_tool_results(conversation(log(1_400_000, "a")), limits=limits(), scope=SCOPE)
    assert caught.value.quota_id == "max_bytes"
    assert caught.value.limit == 2000
    assert await workspace_blob_count(pg_dsn, ws.name) == 0
    usage = await admin_client.get_workspace_usage(ws.name)
    assert (usage.tool_result_bytes, usage.content_bytes) == (0, 0)
    # Ten of them, as the report: every one refused, nothing kept.
    for i in range(10):
        with pytest.raises(QuotaExceededError):
            await ws.client.compact_tool_results(conversation(log(1_400_000, f"b{i}")), limits=limits(), scope=SCOPE)
    assert await workspace_blob_count(pg_dsn, ws.name) == 0


async def test_blob_bytes_and_memory_text_share_the_quota(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_bytes=10 * KB))
    output = log(6 * KB, "x")
    reply = await ws.client.compact_tool_results(conversation(output), limits=limits(), scope=SCOPE)
    assert reply.truncated_count == 1
    usage = await admin_client.get_workspace_usage(ws.name)
    assert usage.tool_result_bytes == len(output.encode())
    # The same output again is the same blob: no more bytes.
    await ws.client.compact_tool_results(conversation(output), limits=limits(), scope=SCOPE)
    assert (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == len(output.encode())
    # 6 KiB of blob + 5 KiB of memory text pass 10 KiB: the memory is refused.
    [vector] = unit_vectors(1, seed=7)
    with pytest.raises(QuotaExceededError) as caught:
        await ws.client.add_memories([mem("m" * 5 * KB, embedding=vector)])
    assert caught.value.quota_id == "max_bytes"
    await ws.client.add_memories([mem("m" * 3 * KB, embedding=vector)])


async def test_erasing_a_scope_releases_its_blob_bytes(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_bytes=10 * KB))
    await ws.client.compact_tool_results(conversation(log(8 * KB, "first")), limits=limits(), scope=SCOPE)
    with pytest.raises(QuotaExceededError):
        await ws.client.compact_tool_results(conversation(log(8 * KB, "second")), limits=limits(), scope=SCOPE)
    await ws.client.delete_memories_by_scope(memory_pb2.Scope(session_id="s"))
    assert (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == 0
    second = log(8 * KB, "second")
    await ws.client.compact_tool_results(conversation(second), limits=limits(), scope=SCOPE)
    assert (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == len(second.encode())


async def test_an_expired_blob_releases_its_bytes(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_bytes=10 * KB))
    first = log(8 * KB, "first")
    await ws.client.compact_tool_results(conversation(first), limits=limits(retention_seconds=1), scope=SCOPE)
    assert (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == len(first.encode())
    await asyncio.sleep(1.1)
    # Expired: a new output fits at once (the put erases the workspace's expired blobs
    # before it counts), even before the cleaner's sweep.
    second = log(8 * KB, "second")
    await ws.client.compact_tool_results(conversation(second), limits=limits(retention_seconds=1), scope=SCOPE)
    assert (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == len(second.encode())
    # The cleaner (every 0.5 s in tests) erases the expired one: usage back to zero.
    for _ in range(100):
        if (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == 0:
            break
        await asyncio.sleep(0.1)
    assert (await admin_client.get_workspace_usage(ws.name)).tool_result_bytes == 0
