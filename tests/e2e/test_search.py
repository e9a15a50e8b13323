"""Hybrid search over gRPC: Chinese keywords, keyword vs semantic, several queries
merged, score breakdown, min_score, filters."""

from __future__ import annotations

import pytest

from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.support import all_of, any_of, cond, mem, not_

HYBRID = retrieval_pb2.SEARCH_MODE_HYBRID
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL
VECTOR = retrieval_pb2.SEARCH_MODE_VECTOR
RERANK = "我们的检索系统先用向量召回候选，再用交叉编码器模型精排，最后按分数返回结果"
OTHERS = ["周末喜欢去西湖边跑步", "我在腾讯做前端开发，主要用 React", "The rerank stage runs after recall"]


@pytest.mark.parametrize("mode", [LEXICAL, HYBRID])
async def test_chinese_word_inside_a_long_sentence_is_found(workspace: TestWorkspace, mode: int) -> None:
    stored = await workspace.client.add_memories([mem(t) for t in [RERANK, *OTHERS]])
    reply = await workspace.client.search("精排", mode=mode)
    assert reply.hits[0].memory.id == stored[0].id
    assert reply.hits[0].lexical.rank == 1
    if mode == LEXICAL:
        assert [h.memory.id for h in reply.hits] == [stored[0].id]


async def test_chinese_query_sentence_finds_memory_by_shared_words(workspace: TestWorkspace) -> None:
    stored = await workspace.client.add_memories([mem(t) for t in [RERANK, *OTHERS]])
    reply = await workspace.client.search("精排模型用的是什么", mode=LEXICAL)
    assert reply.hits[0].memory.id == stored[0].id


async def test_several_queries_are_merged_and_deduplicated(workspace: TestWorkspace) -> None:
    tea, coffee, cello = await workspace.client.add_memories(
        [
            mem("Drinks green tea every morning"),
            mem("Has an espresso coffee after lunch"),
            mem("Plays the cello"),
        ]
    )
    lexical = await workspace.client.search(["tea", "coffee", "tea morning"], mode=LEXICAL)
    by_id = {h.memory.id: h for h in lexical.hits}
    assert set(by_id) == {tea.id, coffee.id}
    assert len(lexical.hits) == 2
    assert by_id[coffee.id].query_index == 1
    assert by_id[tea.id].query_index in (0, 2)  # found by both; each is its query's rank 1

    hybrid = await workspace.client.search(["tea", "coffee", "music", "morning drink"], mode=HYBRID, top_k=10)
    ids = [h.memory.id for h in hybrid.hits]
    assert len(ids) == len(set(ids)) == 3  # every query's vector signal finds all three: still once each
    assert all(0 <= h.query_index < 4 for h in hybrid.hits)
    assert [h.score for h in hybrid.hits] == sorted((h.score for h in hybrid.hits), reverse=True)
    assert {h.memory.id: h.query_index for h in hybrid.hits}[cello.id] == 2  # "music" suits the cello best


async def test_score_breakdown_top_k_and_min_score(workspace: TestWorkspace) -> None:
    stored = await workspace.client.add_memories(
        [mem(f"Project {name} uses PostgreSQL") for name in ("Alpha", "Beta", "Gamma", "Delta")]
    )
    # WEIGHTED reports min-max normalised signals; the default ZSCORE reports z-scores.
    reply = await workspace.client.search(
        "Project Gamma PostgreSQL", top_k=2, fusion=retrieval_pb2.FUSION_METHOD_WEIGHTED
    )
    assert len(reply.hits) == 2
    top = reply.hits[0]
    assert top.memory.id == stored[2].id
    assert 0 < top.score <= 1
    assert top.vector.rank >= 1
    assert -1 <= top.vector.score <= 1
    assert 0 <= top.vector.normalized_score <= 1
    assert top.lexical.rank == 1
    assert top.lexical.score > 0
    assert top.lexical.normalized_score == pytest.approx(1.0)
    assert reply.timing.total_duration.ToNanoseconds() >= reply.timing.database_duration.ToNanoseconds() > 0
    default = await workspace.client.search("Project Gamma PostgreSQL", top_k=4)
    assert default.hits[0].memory.id == stored[2].id
    assert 0 < default.hits[0].score <= 1
    assert default.hits[0].lexical.normalized_score > 0  # z-scores over the candidates: mean 0
    assert (
        min(h.vector.normalized_score for h in default.hits) < 0 < max(h.vector.normalized_score for h in default.hits)
    )
    vector_only = await workspace.client.search("Project Gamma PostgreSQL", mode=VECTOR, top_k=4)
    assert all(h.lexical.rank == 0 for h in vector_only.hits)
    assert len(vector_only.hits) == 4
    full = await workspace.client.search("Project Gamma PostgreSQL", top_k=4)
    assert full.hits[0].score > full.hits[-1].score
    threshold = (full.hits[0].score + full.hits[-1].score) / 2
    cut = await workspace.client.search("Project Gamma PostgreSQL", top_k=4, min_score=threshold)
    assert [h.memory.id for h in cut.hits] == [h.memory.id for h in full.hits if h.score >= threshold]
    assert 1 <= len(cut.hits) < 4


async def test_top_k_zero_means_ten(workspace: TestWorkspace) -> None:
    await workspace.client.add_memories([mem(f"fact number {i}") for i in range(12)])
    reply = await workspace.client.search("fact", top_k=0, mode=LEXICAL)
    assert len(reply.hits) == 10


async def test_filters_over_grpc_scope_type_and_metadata(workspace: TestWorkspace) -> None:
    rows = await workspace.client.add_memories(
        [
            mem("Trip to Kyoto in spring", user_id="u1", metadata={"year": 2023, "tags": ["travel", "japan"]}),
            mem("Trip to Lima in winter", user_id="u1", metadata={"year": 2024, "tags": ["travel"], "cost": "high"}),
            mem(
                "Trip to Oslo for work",
                user_id="u2",
                metadata={"year": 2024, "tags": ["work"]},
                type=memory_pb2.MEMORY_TYPE_PROJECT,
            ),
            mem("Trip notes without metadata", user_id="u1"),
        ]
    )
    kyoto, lima, oslo, bare = (m.id for m in rows)

    async def ids(flt: filter_pb2.MemoryFilter) -> tuple[set[str], set[str]]:
        listed = await workspace.client.list_memories(filter=flt)
        found = await workspace.client.search("trip", filter=flt, top_k=100)
        return {m.id for m in listed.memories}, {h.memory.id for h in found.hits}

    cases = [
        (filter_pb2.MemoryFilter(user_id="u1"), {kyoto, lima, bare}),
        (filter_pb2.MemoryFilter(types=[memory_pb2.MEMORY_TYPE_PROJECT]), {oslo}),
        (filter_pb2.MemoryFilter(metadata=cond("year", filter_pb2.CONDITION_OPERATOR_EQ, 2024)), {lima, oslo}),
        (filter_pb2.MemoryFilter(metadata=cond("year", filter_pb2.CONDITION_OPERATOR_LT, 2024.5)), {kyoto, lima, oslo}),
        (filter_pb2.MemoryFilter(metadata=cond("year", filter_pb2.CONDITION_OPERATOR_EQ, "2024")), set()),
        (
            filter_pb2.MemoryFilter(metadata=cond("tags", filter_pb2.CONDITION_OPERATOR_CONTAINS, "travel")),
            {kyoto, lima},
        ),
        (filter_pb2.MemoryFilter(metadata=cond("cost", filter_pb2.CONDITION_OPERATOR_IN, ["high", "low"])), {lima}),
        (filter_pb2.MemoryFilter(metadata=not_(cond("year", filter_pb2.CONDITION_OPERATOR_EXISTS))), {bare}),
        (
            filter_pb2.MemoryFilter(
                user_id="u1",
                metadata=all_of(
                    cond("year", filter_pb2.CONDITION_OPERATOR_GTE, 2024),
                    any_of(
                        cond("cost", filter_pb2.CONDITION_OPERATOR_NE, "low"),
                        cond("x", filter_pb2.CONDITION_OPERATOR_EXISTS),
                    ),
                ),
            ),
            {lima},
        ),
    ]
    for flt, expected in cases:
        assert await ids(flt) == (expected, expected), flt
