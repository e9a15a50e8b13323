"""Inputs found by a hostile-user pass: each gets INVALID_ARGUMENT (or the documented
status) naming the field, never INTERNAL, and changes nothing stored."""

from __future__ import annotations

import base64
import json

import grpc
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    UnauthenticatedError,
)
from memplane.v1 import filter_pb2, retrieval_pb2, retrieval_pb2_grpc
from tests.fix_server import TestWorkspace
from tests.support import cond, fields, list_all, mem, unit_vectors


async def _one_memory(workspace: TestWorkspace) -> str:
    [m] = await workspace.client.add_memories([mem("kept as it is", embedding=unit_vectors(1, seed=5)[0])])
    return m.id


@pytest.mark.parametrize(
    ("key", "operand", "field"),
    [
        ("a\x00b", 1, "filter.metadata.condition.key"),
        ("topic", "q\x00", "filter.metadata.condition.value"),
    ],
)
async def test_nul_in_a_metadata_filter_is_invalid_argument(
    workspace: TestWorkspace, key: str, operand: object, field: str
) -> None:
    memory_id = await _one_memory(workspace)
    flt = filter_pb2.MemoryFilter(metadata=cond(key, filter_pb2.CONDITION_OPERATOR_EQ, operand))
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.list_memories(filter=flt)
    assert fields(caught.value) == [field]
    with pytest.raises(InvalidArgumentError):
        await workspace.client.search("anything", filter=flt, mode=retrieval_pb2.SEARCH_MODE_LEXICAL)
    assert [m.id for m in await list_all(workspace.client)] == [memory_id]


async def test_nul_in_an_in_list_is_invalid_argument(workspace: TestWorkspace) -> None:
    flt = filter_pb2.MemoryFilter(metadata=cond("topic", filter_pb2.CONDITION_OPERATOR_IN, ["ok", "q\x00"]))
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.list_memories(filter=flt)
    assert fields(caught.value) == ["filter.metadata.condition.value"]


@pytest.mark.parametrize("content", ["\u200b\u200b", "\ufeff \u2060"])
async def test_invisible_content_is_empty(workspace: TestWorkspace, content: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.add_memories([mem(content, embedding=unit_vectors(1)[0])])
    assert fields(caught.value) == ["memories[0].content"]
    assert await list_all(workspace.client) == []


async def test_identity_keys_are_refused_in_any_letter_case(workspace: TestWorkspace) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.add_memories(
            [mem("I like tea", metadata={"USER_ID": "victim"}, embedding=unit_vectors(1)[0])]
        )
    assert fields(caught.value) == ["memories[0].metadata"]
    assert await list_all(workspace.client) == []


async def test_get_transcript_caps_session_id_as_every_scope_field(workspace: TestWorkspace) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.get_transcript("s" * 1_000_000)
    assert fields(caught.value) == ["session_id"]


@pytest.mark.parametrize(
    "token",
    [
        {"t": "2020-01-01T00:00:00+00:00", "i": 5},
        {"t": "2020-01-01T00:00:00+00:00", "i": [1]},
        {"t": 7, "i": "00000000-0000-0000-0000-000000000000"},
        ["not", "an", "object"],
    ],
)
async def test_forged_page_tokens_are_invalid_argument(workspace: TestWorkspace, token: object) -> None:
    forged = base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.list_memories(page_token=forged)
    assert set(fields(caught.value)) == {"page_token"}


async def test_many_violations_fit_in_one_reply_with_details(workspace: TestWorkspace) -> None:
    # 256 empty memories: 256 violations would overflow gRPC's trailing metadata unbounded.
    batch = [mem("", embedding=unit_vectors(1)[0]) for _ in range(256)]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.add_memories(batch)
    found = fields(caught.value)
    assert found[0] == "memories[0].content"
    assert 1 <= len(found) <= 20
    assert await list_all(workspace.client) == []


async def test_an_oversized_field_is_echoed_clipped(workspace: TestWorkspace) -> None:
    memory_id = await _one_memory(workspace)
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.update_memory(memory_id, mem("x"), ["p" * 6000])
    assert fields(caught.value) == ["update_mask"]
    assert len(str(caught.value)) < 1200


async def test_two_authorization_entries_are_unauthenticated(server: str, workspace: TestWorkspace) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListMemories(
                retrieval_pb2.ListMemoriesRequest(),
                metadata=(("authorization", f"Bearer {workspace.key}"), ("authorization", "Bearer other")),
            )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_admin_key_cannot_be_revoked_over_the_api(
    admin_client: AsyncMemplaneClient, admin_key: str, workspace: TestWorkspace
) -> None:
    admin_key_id = admin_key.split("_")[1]
    with pytest.raises(FailedPreconditionError):
        await admin_client.revoke_api_key(admin_key_id)
    assert (await admin_client.get_workspace(workspace.name)).name == workspace.name  # the key still works


@pytest.mark.parametrize("name", ["q\x00", "W" * 9000, "ünïcode"])
async def test_bad_workspace_names_on_admin_calls_are_invalid_argument(
    admin_client: AsyncMemplaneClient, name: str
) -> None:
    for call in (admin_client.get_workspace, admin_client.get_workspace_usage, admin_client.delete_workspace):
        with pytest.raises(InvalidArgumentError) as caught:
            await call(name)
        assert fields(caught.value) == ["name"]
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.create_api_key(name)
    assert fields(caught.value) == ["workspace"]


async def test_a_key_with_a_wrong_secret_is_unauthenticated(server: str, workspace: TestWorkspace) -> None:
    async with AsyncMemplaneClient(server, workspace.key + "x") as client:
        with pytest.raises(UnauthenticatedError):
            await client.list_memories()
