"""SearchMemories' per-request recall options over real gRPC: DBSF fusion, and the
neighbourhood, speaker and time terms, and the context turns. Each term is checked against a search of the same
workspace with the terms off (its fused scores are the base): a boosted hit's score is
(base + its boosts) / the largest such sum among the query's candidates (the best scores
1, as the fusions' best does), each boost is exactly its weight (speaker, time) or its
weight x the best base score of the same session's turns within the window (neighbour),
and with every term 0 the hits are the reference fusion of the two signals
(`memplane.server.retrieval.fusion.fuse`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memplane.errors import InvalidArgumentError
from memplane.eval.runner import TERMS_OFF
from memplane.server.retrieval.fusion import FusionMethod, fuse
from memplane.server.settings import MIN_WEIGHT
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import cond, fields, mem, ts

USER = memory_pb2.MESSAGE_ROLE_USER
MAY, JULY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC), datetime(2023, 7, 20, 18, 0, tzinfo=UTC)
OFF = TERMS_OFF
SESSION_1 = [
    ("D1:1", "Caroline", "I went to an LGBTQ support group yesterday and it was powerful"),
    ("D1:2", "Melanie", "That sounds wonderful, what happened there?"),
    ("D1:3", "Caroline", "People shared their transgender stories and I felt accepted"),
    ("D1:4", "Melanie", "I painted a sunrise over the lake last week"),
    ("D1:5", "Caroline", "Your painting of the lake sounds lovely"),
]
SESSION_2 = [
    ("D2:1", "Melanie", "We went camping with the kids in the mountains"),
    ("D2:2", "Caroline", "I am researching adoption agencies for my family"),
    ("D2:3", "Melanie", "The kids loved roasting marshmallows by the fire"),
]


def message(dia_id: str, speaker: str, text: str, when: datetime) -> writeback_pb2.ConversationMessage:
    out = writeback_pb2.ConversationMessage(id=dia_id, role=USER, name=speaker, content=text)
    out.create_time.CopyFrom(ts(when))
    return out


async def conversation(workspace: TestWorkspace) -> None:
    """Two sessions through WriteConversation (transcript positions, speakers, turn times)."""
    for session, when, turns in (("session_1", MAY, SESSION_1), ("session_2", JULY, SESSION_2)):
        scope = memory_pb2.Scope(user_id="conv", session_id=session)
        await workspace.client.write_conversation(scope, [message(*t, when) for t in turns])


def by_id(reply: retrieval_pb2.SearchMemoriesResponse) -> dict[str, retrieval_pb2.SearchHit]:
    return {h.memory.metadata.fields["message_id"].string_value: h for h in reply.hits}


def boost_sum(hit: retrieval_pb2.SearchHit) -> float:
    """What every query-aware term (each field of ScoreBoosts) added to *hit*."""
    return sum(getattr(hit.boosts, f.name) for f in hit.boosts.DESCRIPTOR.fields)


def rescaled(sums: dict[str, float]) -> dict[str, float]:
    """Each candidate's fusion score + boosts over the largest such sum (every candidate of
    the query is in *sums*: the searches below ask for more hits than there are memories)."""
    best = max(sums.values())
    return {k: v / best for k, v in sums.items()}


async def test_terms_off_are_the_reference_fusion_and_add_nothing(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "What did Caroline feel at the support group in May 2023?"
    for fusion, method in (
        (retrieval_pb2.FUSION_METHOD_WEIGHTED, FusionMethod.WEIGHTED),
        (retrieval_pb2.FUSION_METHOD_DBSF, FusionMethod.DBSF),
        (retrieval_pb2.FUSION_METHOD_ZSCORE, FusionMethod.ZSCORE),
    ):
        hybrid = await workspace.client.search(query, top_k=20, fusion=fusion, vector_weight=0.5, **OFF)
        vector = await workspace.client.search(query, top_k=20, mode=retrieval_pb2.SEARCH_MODE_VECTOR)
        lexical = await workspace.client.search(query, top_k=20, mode=retrieval_pb2.SEARCH_MODE_LEXICAL)
        expected = fuse(
            [(h.memory.id, h.vector.score) for h in vector.hits],
            [(h.memory.id, h.lexical.score) for h in lexical.hits],
            method=method,
            vector_weight=0.5,
            rrf_k=60,
        )
        assert [h.memory.id for h in hybrid.hits] == [e.id for e in expected]
        for got, want in zip(hybrid.hits, expected, strict=True):
            assert got.score == pytest.approx(want.score, abs=1e-9)
            assert boost_sum(got) == 0


async def test_speaker_boost_goes_to_the_turns_of_the_named_speaker(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "What did Melanie paint?"
    base = by_id(await workspace.client.search(query, top_k=20, **OFF))
    boosted = by_id(await workspace.client.search(query, top_k=20, **{**OFF, "speaker_weight": 0.4}))
    assert set(boosted) == set(base) == {d for d, _, _ in SESSION_1 + SESSION_2}
    want = rescaled({d: base[d].score + h.boosts.speaker for d, h in boosted.items()})
    for dia_id, hit in boosted.items():
        speaker = {d: s for d, s, _ in SESSION_1 + SESSION_2}[dia_id]
        assert hit.boosts.speaker == (0.4 if speaker == "Melanie" else 0.0)
        assert hit.score == pytest.approx(want[dia_id])
    first = await workspace.client.search(query, top_k=3, **{**OFF, "speaker_weight": 1.0})
    assert all(h.memory.metadata.fields["speaker"].string_value == "Melanie" for h in first.hits)


async def test_time_boost_goes_to_turns_inside_the_interval_the_query_names(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "Where did the kids go in July 2023?"
    base = by_id(await workspace.client.search(query, top_k=20, **OFF))
    boosted = by_id(await workspace.client.search(query, top_k=20, **{**OFF, "time_weight": 0.5}))
    july = {d for d, _, _ in SESSION_2}
    want = rescaled({d: base[d].score + h.boosts.time for d, h in boosted.items()})
    for dia_id, hit in boosted.items():
        assert hit.boosts.time == (0.5 if dia_id in july else 0.0)
        assert hit.score == pytest.approx(want[dia_id])
    undated = by_id(await workspace.client.search("Where did the kids go?", top_k=20, **{**OFF, "time_weight": 0.5}))
    assert all(h.boosts.time == 0.0 for h in undated.values())


async def test_phrase_boost_goes_to_memories_holding_the_quoted_phrase_in_order(workspace: TestWorkspace) -> None:
    await workspace.client.add_memories(
        [
            mem("I finished reading Becoming Nicole last night"),
            mem("Nicole is becoming a great painter"),  # the words, not the phrase
            mem("a book about courage"),
        ]
    )
    query = 'What did Caroline take away from the book "Becoming Nicole"?'
    base = {h.memory.content: h.score for h in (await workspace.client.search(query, top_k=5, **OFF)).hits}
    reply = await workspace.client.search(query, top_k=5, **{**OFF, "phrase_weight": 0.3})
    boosts = {h.memory.content: h.boosts.phrase for h in reply.hits}
    assert boosts == {
        "I finished reading Becoming Nicole last night": 0.3,
        "Nicole is becoming a great painter": 0.0,
        "a book about courage": 0.0,
    }
    want = rescaled({h.memory.content: base[h.memory.content] + h.boosts.phrase for h in reply.hits})
    for hit in reply.hits:
        assert hit.score == pytest.approx(want[hit.memory.content])
    unquoted = await workspace.client.search("Becoming Nicole", top_k=5, **{**OFF, "phrase_weight": 0.3})
    assert all(h.boosts.phrase == 0.0 for h in unquoted.hits)


async def test_neighbour_term_borrows_the_best_score_within_the_window_of_the_same_session(
    workspace: TestWorkspace,
) -> None:
    await conversation(workspace)
    query = "transgender stories at the support group"
    base = by_id(await workspace.client.search(query, top_k=20, **OFF))
    boosted = by_id(
        await workspace.client.search(query, top_k=20, **{**OFF, "neighbour_window": 1, "neighbour_weight": 0.5})
    )
    order = [[d for d, _, _ in SESSION_1], [d for d, _, _ in SESSION_2]]
    expected: dict[str, float] = {}
    for turns in order:
        for i, dia_id in enumerate(turns):
            window = [turns[j] for j in (i - 1, i + 1) if 0 <= j < len(turns)]
            expected[dia_id] = 0.5 * max(base[n].score for n in window)
            assert boosted[dia_id].boosts.neighbour == pytest.approx(expected[dia_id], abs=1e-9)
    want = rescaled({d: base[d].score + expected[d] for d in expected})
    for dia_id, hit in boosted.items():
        assert hit.score == pytest.approx(want[dia_id], abs=1e-9)
    # D2:1 is next to no D1 turn: the first turn of session 2 borrows from D2:2 only.
    assert boosted["D2:1"].boosts.neighbour == pytest.approx(0.5 * base["D2:2"].score, abs=1e-9)


async def test_memories_without_a_transcript_are_neighbours_in_the_order_written(workspace: TestWorkspace) -> None:
    texts = ["the support group met on Tuesday", "the group shared transgender stories", "we painted the lake"]
    added = await workspace.client.add_memories([mem(t, session_id="s") for t in texts])
    alone = await workspace.client.add_memories([mem("transgender stories at the library")])  # no session
    query = "transgender stories at the support group"
    base = {h.memory.id: h.score for h in (await workspace.client.search(query, top_k=10, **OFF)).hits}
    window = {**OFF, "neighbour_window": 1, "neighbour_weight": 0.5}
    got = {h.memory.id: h.boosts.neighbour for h in (await workspace.client.search(query, top_k=10, **window)).hits}
    a, b, c = (m.id for m in added)
    assert got[a] == pytest.approx(0.5 * base[b], abs=1e-9)
    assert got[b] == pytest.approx(0.5 * max(base[a], base[c]), abs=1e-9)
    assert got[c] == pytest.approx(0.5 * base[b], abs=1e-9)
    assert got[alone[0].id] == 0.0


async def test_a_lone_exact_match_scores_1_under_the_default_terms_and_passes_min_score(
    workspace: TestWorkspace,
) -> None:
    """The query's best candidate scores 1 with the terms on, as the fusions' best does: a
    hit that gains no boost is not scaled down by the weights in use (it was 1 / 2.4 with
    the defaults, and min_score 0.5 dropped the only, exact match)."""
    await workspace.client.add_memories([mem("I drink oolong tea every morning")])
    reply = await workspace.client.search("I drink oolong tea every morning", top_k=5)
    assert [h.score for h in reply.hits] == [1.0]
    kept = await workspace.client.search("I drink oolong tea every morning", top_k=5, min_score=0.5)
    assert [h.memory.content for h in kept.hits] == ["I drink oolong tea every morning"]


async def test_the_best_hit_of_a_boosted_query_scores_1_and_the_order_is_the_boosted_sum(
    workspace: TestWorkspace,
) -> None:
    await conversation(workspace)
    query = "What did Melanie paint in May 2023?"
    base = by_id(await workspace.client.search(query, top_k=20, **OFF))
    reply = await workspace.client.search(query, top_k=20, **DEFAULTS)
    assert len(reply.hits) == len(base) == 8
    sums = {d: base[d].score + boost_sum(h) for d, h in by_id(reply).items()}
    assert any(sums[d] != base[d].score for d in sums)  # the terms did add something
    scores = [h.score for h in reply.hits]
    assert scores[0] == 1.0
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert [h.memory.metadata.fields["message_id"].string_value for h in reply.hits] == sorted(
        sums, key=lambda d: (-sums[d], by_id(reply)[d].memory.id)
    )
    want = rescaled(sums)
    for dia_id, hit in by_id(reply).items():
        assert hit.score == pytest.approx(want[dia_id], abs=1e-9)
    # min_score and top_k cut the rescaled scores.
    cut = await workspace.client.search(query, top_k=3, min_score=scores[4], **DEFAULTS)
    assert [h.memory.id for h in cut.hits] == [h.memory.id for h in reply.hits[:3]]
    cut = await workspace.client.search(query, top_k=20, min_score=scores[2], **DEFAULTS)
    assert [h.memory.id for h in cut.hits] == [h.memory.id for h in reply.hits if h.score >= scores[2]]


async def test_context_turns_come_back_in_order_within_the_token_bound(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "People shared their transgender stories and I felt accepted"
    reply = await workspace.client.search(query, top_k=3, context_turns=2, context_max_tokens=10_000)
    top = reply.hits[0]
    assert top.memory.metadata.fields["message_id"].string_value == "D1:3"
    got = [(c.offset, c.message_id, c.name, c.content) for c in top.context]
    assert got == [(i - 2, d, s, t) for i, (d, s, t) in enumerate(SESSION_1) if i != 2]
    assert all(c.tokens > 0 for c in top.context)
    # A bound of the nearest two turns' tokens keeps exactly them (the earlier first on a tie).
    nearest = sum(c.tokens for c in top.context if abs(c.offset) == 1)
    bounded = await workspace.client.search(query, top_k=1, context_turns=2, context_max_tokens=nearest)
    assert [c.offset for c in bounded.hits[0].context] == [-1, 1]
    # The last turn of a session has turns before it only; none asked, none returned.
    last = await workspace.client.search("roasting marshmallows by the fire", top_k=1, context_turns=5)
    assert [c.message_id for c in last.hits[0].context] == ["D2:1", "D2:2"]
    plain = await workspace.client.search(query, top_k=3)
    assert all(len(h.context) == 0 for h in plain.hits)


async def test_memories_without_a_transcript_have_no_context(workspace: TestWorkspace) -> None:
    await workspace.client.add_memories([mem("the support group met on Tuesday", session_id="s")])
    reply = await workspace.client.search("support group", top_k=1, context_turns=3)
    assert len(reply.hits) == 1
    assert len(reply.hits[0].context) == 0


async def test_rm3_expands_the_lexical_signal_from_its_best_memories(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "LGBTQ support group"
    lexical = retrieval_pb2.SEARCH_MODE_LEXICAL
    plain = await workspace.client.search(query, top_k=10, mode=lexical, **OFF)
    expanded = await workspace.client.search(query, top_k=10, mode=lexical, **{**OFF, "prf_terms": 10})
    ids = {h.memory.metadata.fields["message_id"].string_value for h in plain.hits}
    more = {h.memory.metadata.fields["message_id"].string_value for h in expanded.hits}
    assert ids == {"D1:1"}  # the one turn holding a query lexeme
    assert ids < more  # the feedback turn's lexemes (its words, speaker and date) reach other turns
    assert expanded.hits[0].memory.metadata.fields["message_id"].string_value == "D1:1"


async def test_unset_terms_take_the_server_defaults(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "What did Melanie paint in May 2023?"
    unset = await workspace.client.search(query, top_k=20)
    explicit = await workspace.client.search(query, top_k=20, **DEFAULTS)
    assert [(h.memory.id, round(h.score, 12)) for h in unset.hits] == [
        (h.memory.id, round(h.score, 12)) for h in explicit.hits
    ]


DEFAULTS: dict[str, Any] = {}
"""The server's retrieval defaults of the terms (set below from Settings)."""


def _defaults() -> None:
    from memplane.domain.ranking import TERMS, Ranking
    from memplane.server.settings import RetrievalSettings

    r = Ranking.from_settings(RetrievalSettings())
    DEFAULTS.update({name: getattr(r, name) for name in TERMS})


_defaults()


@pytest.mark.parametrize(
    "name", ["vector_weight", "neighbour_weight", "speaker_weight", "time_weight", "phrase_weight", "when_weight"]
)
@pytest.mark.parametrize("tiny", [5e-324, 1e-300, 1e-7])
async def test_a_weight_too_small_to_compute_with_is_refused_naming_it(
    workspace: TestWorkspace, name: str, tiny: float
) -> None:
    """A positive weight under MIN_WEIGHT underflows PostgreSQL's float8 arithmetic (it raises
    rather than rounding to 0: 5e-324 x 0.4 was an INTERNAL error): refused naming the field,
    while MIN_WEIGHT itself and 0 are searches."""
    await conversation(workspace)
    query = "What did Caroline feel at the support group in May 2023?"
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.search(query, top_k=20, **{**OFF, name: tiny})
    assert fields(caught.value) == [f"ranking.{name}"]
    for fine in (MIN_WEIGHT, 0.0):
        reply = await workspace.client.search(query, top_k=20, **{**OFF, name: fine})
        scores = [h.score for h in reply.hits]
        assert len(scores) == 8
        assert scores == sorted(scores, reverse=True)
        assert all(0.0 <= s <= 1.0 for s in scores)


async def test_context_turns_are_the_hits_own_users_even_when_another_user_shares_the_session_id(
    workspace: TestWorkspace,
) -> None:
    """Two users of one workspace writing to the same session id share its transcript (it is
    keyed by session); a search filtered to one user must not return the other's turns as
    context."""
    await conversation(workspace)  # user "conv", session_1
    other = memory_pb2.Scope(user_id="someone-else", session_id="session_1")
    await workspace.client.write_conversation(other, [message("X:1", "Mallory", "my bank PIN is 4321", MAY)])
    only_conv = filter_pb2.MemoryFilter(user_id="conv")
    reply = await workspace.client.search(
        "People shared their transgender stories", top_k=20, filter=only_conv, context_turns=10
    )
    assert {h.memory.scope.user_id for h in reply.hits} == {"conv"}
    turns = [c for h in reply.hits for c in h.context]
    assert turns  # the hits of session_1 do have context
    assert all(c.message_id != "X:1" and "PIN" not in c.content for c in turns)
    top = reply.hits[0]
    assert top.memory.metadata.fields["message_id"].string_value == "D1:3"
    assert [c.message_id for c in top.context] == [d for d, _, _ in SESSION_1 if d != "D1:3"]
    # The other user's own hit gets the other user's turns only (none here besides itself).
    mine = await workspace.client.search(
        "bank PIN", top_k=1, context_turns=10, filter=filter_pb2.MemoryFilter(user_id="someone-else")
    )
    assert mine.hits[0].memory.content == "my bank PIN is 4321"
    assert list(mine.hits[0].context) == []


async def test_a_memory_naming_another_users_turn_gets_none_of_that_users_turns_as_context(
    workspace: TestWorkspace,
) -> None:
    """AddMemories lets a client set provenance, to any session and message id of the
    workspace: a memory of one user naming another user's turn must not bring the other
    user's words back as its context in a search filtered to the first user (the hit's
    place in a transcript counts only where the turn is its own user's and agent's)."""
    await conversation(workspace)  # user "conv", session_1
    secret = memory_pb2.Scope(user_id="ann", session_id="ann-session")
    await workspace.client.write_conversation(
        secret,
        [
            message("A:1", "Ann", "my bank PIN is 4321", MAY),
            message("A:2", "Ann", "I keep bees in the garden", MAY),
            message("A:3", "Ann", "my password hint is fluffy", MAY),
        ],
    )
    on_ann = memory_pb2.Provenance(session_id="ann-session", message_ids=["A:2"])
    on_conv = memory_pb2.Provenance(session_id="session_1", message_ids=["D1:3"])
    await workspace.client.add_memories(
        [
            mem("bees are lovely insects", user_id="bob", provenance=on_ann),
            mem("transgender stories were shared", user_id="conv", provenance=on_conv),
        ]
    )
    bob = await workspace.client.search("bees", top_k=1, context_turns=2, filter=filter_pb2.MemoryFilter(user_id="bob"))
    assert bob.hits[0].memory.content == "bees are lovely insects"
    assert [(c.message_id, c.content) for c in bob.hits[0].context] == []
    # A note of the turn's own user keeps the turn's context.
    conv = await workspace.client.search(
        "transgender stories were shared", top_k=1, context_turns=1, filter=filter_pb2.MemoryFilter(user_id="conv")
    )
    assert conv.hits[0].memory.content == "transgender stories were shared"
    assert [c.message_id for c in conv.hits[0].context] == ["D1:2", "D1:4"]


async def _turns(workspace: TestWorkspace) -> dict[str, memory_pb2.Memory]:
    """The conversation written, and its turns' memories by message id."""
    await conversation(workspace)
    return {
        h.memory.metadata.fields["message_id"].string_value: h.memory
        for h in (await workspace.client.search("support group", top_k=20, **OFF)).hits
    }


async def test_a_deleted_or_corrected_turn_does_not_come_back_as_another_hits_context(
    workspace: TestWorkspace,
) -> None:
    """A turn is context while its memory (the EPISODIC memory WriteConversation wrote for
    it, found by provenance) is current, and with that memory's text: DeleteMemory forgets
    it, UpdateMemory's correction replaces its words, a closed validity (valid_to_time)
    hides it unless the search asks for superseded memories."""
    turns = await _turns(workspace)
    await workspace.client.delete_memory(turns["D1:2"].id)
    await workspace.client.update_memory(
        turns["D1:4"].id, memory_pb2.MemoryInput(content="I painted a forest at dusk"), ["content"]
    )
    closed = memory_pb2.MemoryInput()
    closed.valid_to_time.CopyFrom(ts(JULY))
    await workspace.client.update_memory(turns["D1:5"].id, closed, ["valid_to_time"])
    query = "People shared their transgender stories"
    reply = await workspace.client.search(query, top_k=1, context_turns=2)
    assert reply.hits[0].memory.metadata.fields["message_id"].string_value == "D1:3"
    context = [(c.message_id, c.name, c.content) for c in reply.hits[0].context]
    assert context == [
        ("D1:1", "Caroline", SESSION_1[0][2]),  # untouched
        ("D1:4", "Melanie", "I painted a forest at dusk"),  # corrected: the correction
    ]  # D1:2 deleted, D1:5 superseded
    superseded_too = filter_pb2.MemoryFilter(include_superseded=True)
    reply = await workspace.client.search(query, top_k=1, context_turns=2, filter=superseded_too)
    assert [c.message_id for c in reply.hits[0].context] == ["D1:1", "D1:4", "D1:5"]


async def test_only_the_turns_own_memory_stands_for_it_as_context(workspace: TestWorkspace) -> None:
    """Other memories may name a turn as their provenance (AddMemories lets a client set
    it: a note on the turn, a summary of several): they never stand in for the turn, whose
    own memory is its raw-turn memory (EPISODIC, metadata naming the message id, as
    migration 0013 defines one). With that deleted, the turn is no context: its place in
    the window goes to the user's next current turn (D1:1)."""
    turns = await _turns(workspace)
    on_d12 = memory_pb2.Provenance(session_id="session_1", message_ids=["D1:2"])
    on_both = memory_pb2.Provenance(session_id="session_1", message_ids=["D1:2", "D1:3"])
    episodic = memory_pb2.MEMORY_TYPE_EPISODIC
    await workspace.client.add_memories(
        [
            mem("Melanie was curious", user_id="conv", session_id="session_1", type=episodic, provenance=on_d12),
            mem("They talked about it", user_id="conv", session_id="session_1", type=episodic, provenance=on_both),
        ]
    )
    query = "People shared their transgender stories"
    only_turns = filter_pb2.MemoryFilter(metadata=cond("message_id", filter_pb2.CONDITION_OPERATOR_EXISTS))

    async def context() -> list[tuple[str, str]]:
        reply = await workspace.client.search(query, top_k=1, context_turns=1, filter=only_turns)
        assert reply.hits[0].memory.metadata.fields["message_id"].string_value == "D1:3"
        return [(c.message_id, c.content) for c in reply.hits[0].context]

    assert await context() == [("D1:2", SESSION_1[1][2]), ("D1:4", SESSION_1[3][2])]
    await workspace.client.delete_memory(turns["D1:2"].id)
    assert await context() == [("D1:1", SESSION_1[0][2]), ("D1:4", SESSION_1[3][2])]


async def test_a_deleted_or_closed_turn_lends_no_neighbour_score(workspace: TestWorkspace) -> None:
    """The neighbourhood term borrows only from current memories: with D1:2 deleted and
    D1:4 closed, D1:3 (between them, window 1) borrows nothing, and D1:1 and D1:5 (whose
    only neighbours they were) nothing either."""
    turns = await _turns(workspace)
    await workspace.client.delete_memory(turns["D1:2"].id)
    closed = memory_pb2.MemoryInput()
    closed.valid_to_time.CopyFrom(ts(JULY))
    await workspace.client.update_memory(turns["D1:4"].id, closed, ["valid_to_time"])
    query = "That sounds wonderful, I painted a sunrise over the lake"  # the gone turns' own words
    window = {**OFF, "neighbour_window": 1, "neighbour_weight": 0.5}
    got = by_id(await workspace.client.search(query, top_k=20, **window))
    assert {"D1:1", "D1:3", "D1:5"} <= set(got)
    assert not {"D1:2", "D1:4"} & set(got)
    assert [got[d].boosts.neighbour for d in ("D1:1", "D1:3", "D1:5")] == [0.0, 0.0, 0.0]
    assert got["D2:2"].boosts.neighbour > 0  # the term is on: session 2's turns still lend
