"""The two ways one search statement finds its candidates rank alike, over real gRPC.

A search filtered to a user whose memories are few reads that user's rows through the btree
scope index (the "prefilter": every row a lexical candidate, the vector distances sorted);
a search over the whole workspace finds its lexical candidates through the GIN index (the
rarest lexemes within the postings budget, which a small workspace never exceeds) and its
vector candidates by the same exact sort. In a workspace where that user owns every memory
both see the same rows and the same BM25 statistics, so every hit must come back the same:
the same memories in the same order, the same fused score, each signal's score, normalised
score and rank, each term's boost and the context turns. A change to either path that drops
a candidate, scores one differently or reorders them fails here (the prefilter's @@ test was
removed in favour of BM25's own join: this is what shows the ranking did not move)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import mem, ts

USER = "caroline-and-melanie"
TURNS = {
    ("session_1", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)): [
        ("D1:1", "Caroline", "I went to an LGBTQ support group yesterday and it was powerful"),
        ("D1:2", "Melanie", "That sounds wonderful, what happened at the support group?"),
        ("D1:3", "Caroline", "People shared their transgender stories and I felt accepted"),
        ("D1:4", "Melanie", "I painted a sunrise over the lake last week"),
        ("D1:5", "Caroline", "Your painting of the lake sounds lovely, I want to paint too"),
        ("D1:6", "Melanie", "Come to my pottery class, we made plates and bowls"),
    ],
    ("session_2", datetime(2023, 7, 20, 18, 0, tzinfo=UTC)): [
        ("D2:1", "Melanie", "We went camping with the kids in the mountains last weekend"),
        ("D2:2", "Caroline", "I am researching adoption agencies for my family"),
        ("D2:3", "Melanie", "The kids loved roasting marshmallows by the fire at the lake"),
        ("D2:4", "Caroline", "The adoption agency said the support of friends matters"),
    ],
}
# Memories without a transcript (AddMemories): neighbours in the order written within "notes".
NOTES = [
    "Caroline keeps a journal about her transition",
    "Melanie runs a charity race for mental health every spring",
    "Caroline and Melanie went to a Pride parade together",
    "Melanie's favourite painting is of the lake at sunrise",
]
QUERIES = [
    "What did Caroline feel at the support group in May 2023?",
    "What did Melanie paint?",
    'Who said "support of friends" about adoption?',
    "pottery class plates",
    "kids lake camping fire",
    "What does Caroline write in her journal?",
    "mental health charity race",
    "When did Caroline go to the support group?",  # the when-question term
]
HYBRID, LEXICAL, VECTOR = (
    retrieval_pb2.SEARCH_MODE_HYBRID,
    retrieval_pb2.SEARCH_MODE_LEXICAL,
    retrieval_pb2.SEARCH_MODE_VECTOR,
)
OPTIONS: list[dict[str, Any]] = [
    {},  # the server's defaults: ZSCORE fusion, neighbourhood, speaker, time, phrase and when terms
    {"mode": LEXICAL},
    {"mode": VECTOR},
    {"fusion": retrieval_pb2.FUSION_METHOD_RRF},
    {"fusion": retrieval_pb2.FUSION_METHOD_DBSF, "vector_weight": 0.3},
    {"fusion": retrieval_pb2.FUSION_METHOD_WEIGHTED, "neighbour_weight": 0, "speaker_weight": 0},
    {"prf_terms": 10},  # RM3: the expanded query's candidates come the same two ways
    {"prf_terms": 10, "mode": LEXICAL},
    {"context_turns": 2, "context_max_tokens": 10_000},
]


async def seed(workspace: TestWorkspace) -> None:
    for (session, when), turns in TURNS.items():
        messages = []
        for dia_id, speaker, text in turns:
            m = writeback_pb2.ConversationMessage(
                id=dia_id, role=memory_pb2.MESSAGE_ROLE_USER, name=speaker, content=text
            )
            m.create_time.CopyFrom(ts(when))
            messages.append(m)
        await workspace.client.write_conversation(memory_pb2.Scope(user_id=USER, session_id=session), messages)
    await workspace.client.add_memories([mem(t, user_id=USER, session_id="notes") for t in NOTES])


def hit_fields(hit: retrieval_pb2.SearchHit) -> list[Any]:
    """Everything a hit says about how it was ranked, flat."""
    fields: list[Any] = [hit.memory.id, hit.score, hit.query_index]
    for name, signal in (("vector", hit.vector), ("lexical", hit.lexical)):
        fields += [hit.HasField(name), signal.score, signal.normalized_score, signal.rank]
    fields += [getattr(hit.boosts, f.name) for f in hit.boosts.DESCRIPTOR.fields]
    for c in hit.context:
        fields += [c.offset, c.message_id, c.content]
    return fields


def alike(a: list[Any], b: list[Any]) -> bool:
    """Equal, floats within 1e-9 relative (PostgreSQL sums a BM25 score's terms in the
    order its hash aggregate meets them: the last bit may differ between two runs)."""
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) if isinstance(x, float) else x == y
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
async def test_a_users_search_ranks_as_the_whole_workspace_search_over_the_same_rows(
    workspace: TestWorkspace, options: dict[str, Any]
) -> None:
    await seed(workspace)
    mine = filter_pb2.MemoryFilter(user_id=USER)
    compared = 0
    for query in QUERIES:
        scoped = await workspace.client.search(query, top_k=50, filter=mine, **options)
        whole = await workspace.client.search(query, top_k=50, **options)
        assert len(scoped.hits) > 0
        assert [h.memory.id for h in scoped.hits] == [h.memory.id for h in whole.hits], query
        for a, b in zip(scoped.hits, whole.hits, strict=True):
            assert alike(hit_fields(a), hit_fields(b)), (query, hit_fields(a), hit_fields(b))
        compared += len(scoped.hits)
    assert compared >= len(QUERIES)  # not vacuous
