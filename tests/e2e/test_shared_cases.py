"""The shared cases C001 to C005 (/work/shared/cases/cases.jsonl), inputs inlined, run over
gRPC against the real server and database. C006 to C008 belong to the compaction service:
`test_c006_*` in test_compaction_context.py, `test_c007_*` in test_compaction_summaries.py,
`test_c008_*` in test_compaction_tool_results.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError, NotFoundError
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import clustered_unit_vectors, fields, list_all, mem, unit_vectors

LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL
HYBRID = retrieval_pb2.SEARCH_MODE_HYBRID
VECTOR = retrieval_pb2.SEARCH_MODE_VECTOR


async def test_c001_chinese_keyword_inside_a_sentence_is_found_lexically(workspace: TestWorkspace) -> None:
    stored = await workspace.client.add_memories([mem("我在腾讯做前端开发，主要用 React"), mem("周末喜欢去西湖边跑步")])
    reply = await workspace.client.search("腾讯", mode=LEXICAL)
    assert [h.memory.id for h in reply.hits] == [stored[0].id]  # the other shares no word
    assert reply.hits[0].lexical.rank == 1
    assert reply.hits[0].lexical.score > 0
    hybrid = await workspace.client.search("腾讯", mode=HYBRID)
    assert hybrid.hits[0].memory.id == stored[0].id


@pytest.mark.parametrize(
    "fusion",
    [
        retrieval_pb2.FUSION_METHOD_UNSPECIFIED,  # the server's default (ZSCORE) with the default recall terms
        retrieval_pb2.FUSION_METHOD_RRF,
        retrieval_pb2.FUSION_METHOD_WEIGHTED,
        retrieval_pb2.FUSION_METHOD_DBSF,
        retrieval_pb2.FUSION_METHOD_ZSCORE,
    ],
)
async def test_c002_exact_keyword_match_outranks_vague_semantic_match(workspace: TestWorkspace, fusion: int) -> None:
    stored = await workspace.client.add_memories(
        [
            mem("The deploy key for project Falcon is stored under secret/falcon/deploy"),
            mem("The user enjoys deploying side projects on weekends"),
        ]
    )
    reply = await workspace.client.search("Falcon deploy key", mode=HYBRID, fusion=fusion)
    assert [h.memory.id for h in reply.hits[:2]] == [stored[0].id, stored[1].id]
    assert reply.hits[0].score > reply.hits[1].score
    assert reply.hits[0].lexical.rank == 1
    assert reply.hits[0].vector.rank >= 1  # both signals saw it


@pytest.mark.slow
async def test_c003_small_scope_in_a_large_workspace_gets_all_its_memories(workspace: TestWorkspace) -> None:
    """20,000 filler memories are seeded through AddMemories' `embedding` field with
    precomputed random unit vectors (a Gaussian mixture around 64 random centres; no
    model call), in batches of 256, two batches in flight; the 3 memories of scope
    u-small are embedded by the server and stored among them (first, middle, last), so
    the scope is spread over the whole HNSW graph."""
    client = workspace.client
    total, batch = 20_000, 256
    vectors = clustered_unit_vectors(total, seed=3)
    scope_texts = [
        "Tomás went hiking in the Dolomites last August",
        "Tomás prefers mountain trails with long climbs",
        "Tomás bought new hiking boots for the alpine trip",
    ]
    scope_ids: list[str] = []

    async def add_scope_memory(i: int) -> None:
        stored = await client.add_memories([mem(scope_texts[i], user_id="u-small")])
        scope_ids.append(stored[0].id)

    semaphore = asyncio.Semaphore(2)

    async def add_batch(start: int) -> None:
        async with semaphore:
            await client.add_memories(
                [
                    mem(f"filler note {i} about nothing in particular", user_id=f"u-{i % 97}", embedding=vectors[i])
                    for i in range(start, min(start + batch, total))
                ]
            )

    await add_scope_memory(0)
    starts = list(range(0, total, batch))
    half = len(starts) // 2
    await asyncio.gather(*(add_batch(s) for s in starts[:half]))
    await add_scope_memory(1)
    await asyncio.gather(*(add_batch(s) for s in starts[half:]))
    await add_scope_memory(2)

    only_small = filter_pb2.MemoryFilter(user_id="u-small")
    for mode in (VECTOR, HYBRID):
        reply = await client.search("outdoor trips in the mountains", top_k=10, filter=only_small, mode=mode)
        assert sorted(h.memory.id for h in reply.hits) == sorted(scope_ids), mode
        assert all(h.memory.scope.user_id == "u-small" for h in reply.hits)
    listed = await client.list_memories(filter=only_small)
    assert listed.total_size == 3
    everything = await client.search("outdoor trips in the mountains", top_k=10, mode=VECTOR)
    assert len(everything.hits) == 10  # the unfiltered path (HNSW over 20,003 rows) still fills top_k
    assert (await client.list_memories(page_size=1)).total_size == total + 3


async def test_c004_identity_keys_in_metadata_are_refused_and_nothing_stored(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.add_memories(
            [mem("I like coffee", metadata={"agent_id": "someone-else", "user_id": "victim"})]
        )
    assert fields(caught.value) == ["memories[0].metadata"]
    assert "user_id" in caught.value.violations[0].description
    assert (await workspace.client.list_memories()).total_size == 0
    victim = filter_pb2.MemoryFilter(user_id="victim", include_expired=True, include_superseded=True)
    assert (await workspace.client.list_memories(filter=victim)).total_size == 0
    assert (await admin_client.get_workspace_usage(workspace.name)).memory_count == 0


async def test_c005_delete_by_scope_erases_only_that_scope(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    a, b = await workspace_factory(), await workspace_factory()
    texts = {
        "alice": ["Alice likes jasmine tea", "Alice lives in Lyon"],
        "bob": ["Bob plays the cello", "Bob is vegan"],
    }
    vec = unit_vectors(6, seed=5)
    a_alice = await a.client.add_memories(
        [mem(t, user_id="alice", embedding=vec[i]) for i, t in enumerate(texts["alice"])]
    )
    a_bob = await a.client.add_memories(
        [mem(t, user_id="bob", embedding=vec[2 + i]) for i, t in enumerate(texts["bob"])]
    )
    b_alice = await b.client.add_memories(
        [mem(t, user_id="alice", embedding=vec[4 + i]) for i, t in enumerate(texts["alice"])]
    )

    reply = await a.client.delete_memories_by_scope(memory_pb2.Scope(user_id="alice"))
    assert reply.deleted_count == 2

    # A/alice: gone from list, search and get; history ends with a content-free DELETE.
    assert {m.id for m in await list_all(a.client)} == {m.id for m in a_bob}
    alice_filter = filter_pb2.MemoryFilter(user_id="alice", include_superseded=True, include_expired=True)
    assert (await a.client.list_memories(filter=alice_filter)).total_size == 0
    found = await a.client.search("Alice jasmine tea Lyon", mode=LEXICAL)
    assert found.hits == []
    for gone in a_alice:
        with pytest.raises(NotFoundError):
            await a.client.get_memory(gone.id)
        events = await a.client.list_memory_events(gone.id)
        assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_DELETE]
        assert not any(e.HasField("before") or e.HasField("after") for e in events)  # content redacted

    # A/bob and B/alice keep every memory, unchanged, in list, get, search and history.
    for client, kept in ((a.client, a_bob), (b.client, b_alice)):
        assert sorted(m.id for m in await list_all(client)) == sorted(m.id for m in kept)
        for memory in kept:
            assert await client.get_memory(memory.id) == memory
            events = await client.list_memory_events(memory.id)
            assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD]
            assert events[0].after == memory
    hits = await b.client.search("Alice jasmine tea Lyon", mode=LEXICAL)
    assert {h.memory.id for h in hits.hits} == {m.id for m in b_alice}
    assert (await admin_client.get_workspace_usage(a.name)).memory_count == 2
    assert (await admin_client.get_workspace_usage(b.name)).memory_count == 2


async def test_c005_empty_scope_is_refused_naming_scope(workspace: TestWorkspace) -> None:
    stored = await workspace.client.add_memories([mem("kept", user_id="u", embedding=np.ones(384))])
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.delete_memories_by_scope(memory_pb2.Scope())
    assert fields(caught.value) == ["scope"]
    assert await workspace.client.get_memory(stored[0].id) == stored[0]
    assert (await workspace.client.list_memories()).total_size == 1
