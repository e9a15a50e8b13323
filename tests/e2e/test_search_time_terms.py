"""SearchMemories' when-question term and the relative expressions of the time term, over
real gRPC (`memplane.server.storage.search_boosts`): a question that asks for a time boosts the
turns holding a relative time expression ("yesterday", "last week"), exactly by its weight,
and nothing else; a turn's own "last month" moves the time the time term dates it at."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memplane.v1 import memory_pb2
from tests.e2e.test_search_terms import OFF, SESSION_1, SESSION_2, by_id, conversation, message, rescaled
from tests.fix_server import TestWorkspace

TIMED = {"D1:1", "D1:4"}  # "... yesterday ...", "... last week"


async def test_when_boost_goes_to_turns_holding_a_relative_time_expression(workspace: TestWorkspace) -> None:
    await conversation(workspace)
    query = "When did Melanie paint the lake?"
    base = by_id(await workspace.client.search(query, top_k=20, **OFF))
    boosted = by_id(await workspace.client.search(query, top_k=20, **{**OFF, "when_weight": 0.3}))
    assert set(boosted) == set(base) == {d for d, _, _ in SESSION_1 + SESSION_2}
    want = rescaled({d: base[d].score + h.boosts.when for d, h in boosted.items()})
    for dia_id, hit in boosted.items():
        assert hit.boosts.when == (0.3 if dia_id in TIMED else 0.0), dia_id
        assert hit.score == pytest.approx(want[dia_id], abs=1e-9)
    top = await workspace.client.search(query, top_k=2, **{**OFF, "when_weight": 1.0})
    assert {h.memory.metadata.fields["message_id"].string_value for h in top.hits} == TIMED


@pytest.mark.parametrize("query", ["What did Melanie paint?", "Did Melanie paint the lake when it rained?"])
async def test_a_question_that_does_not_ask_when_gets_no_when_boost(workspace: TestWorkspace, query: str) -> None:
    await conversation(workspace)
    reply = await workspace.client.search(query, top_k=20, **{**OFF, "when_weight": 1.0})
    assert len(reply.hits) == 8
    assert all(h.boosts.when == 0.0 for h in reply.hits)


async def test_a_turns_last_month_dates_it_a_month_earlier_for_the_time_term(workspace: TestWorkspace) -> None:
    """A session of 20 July: its "last month" turn tells of June, so a question about June
    finds it dated; a question about July still does too (a turn keeps its own time)."""
    july_20 = datetime(2023, 7, 20, 18, 0, tzinfo=UTC)
    turns = [
        ("D3:1", "Melanie", "Last month I ran a charity race for the kids"),
        ("D3:2", "Caroline", "Wow, how did the race go?"),
        ("D3:3", "Melanie", "Tomorrow I start a pottery class"),
    ]
    scope = memory_pb2.Scope(user_id="conv", session_id="session_3")
    await workspace.client.write_conversation(scope, [message(*t, july_20) for t in turns])
    june = by_id(
        await workspace.client.search("What did Melanie do in June 2023?", top_k=5, **{**OFF, "time_weight": 0.5})
    )
    assert {d: h.boosts.time for d, h in june.items()} == {"D3:1": 0.5, "D3:2": 0.0, "D3:3": 0.0}
    july = by_id(
        await workspace.client.search("What did Melanie do in July 2023?", top_k=5, **{**OFF, "time_weight": 0.5})
    )
    assert {d: h.boosts.time for d, h in july.items()} == {"D3:1": 0.5, "D3:2": 0.5, "D3:3": 0.5}
    undated = await workspace.client.search("What did Melanie do?", top_k=5, **{**OFF, "time_weight": 0.5})
    assert all(h.boosts.time == 0.0 for h in undated.hits)


async def test_a_relative_expression_split_by_other_whitespace_counts_as_written_with_one_space(
    workspace: TestWorkspace,
) -> None:
    """A turn's text may break a line or double a space inside "last week" (the query's own
    "last  week" is read with any whitespace, `memplane.server.retrieval.query`): the when term
    boosts it and the time term moves its date, as for the expression written with one space."""
    july_20 = datetime(2023, 7, 20, 18, 0, tzinfo=UTC)
    turns = [
        ("D4:1", "Melanie", "I painted the lake last  week"),
        ("D4:2", "Melanie", "Last\nmonth I ran a charity race"),
        ("D4:3", "Melanie", "I started pottery 3\tyears ago"),
        ("D4:4", "Melanie", "I like the lake"),
    ]
    scope = memory_pb2.Scope(user_id="conv", session_id="session_4")
    await workspace.client.write_conversation(scope, [message(*t, july_20) for t in turns])
    when = by_id(await workspace.client.search("When did Melanie paint?", top_k=5, **{**OFF, "when_weight": 0.3}))
    assert {d: h.boosts.when for d, h in when.items()} == {"D4:1": 0.3, "D4:2": 0.3, "D4:3": 0.3, "D4:4": 0.0}
    june = by_id(
        await workspace.client.search("What did Melanie do in June 2023?", top_k=5, **{**OFF, "time_weight": 0.5})
    )
    assert {d: h.boosts.time for d, h in june.items()} == {"D4:1": 0.0, "D4:2": 0.5, "D4:3": 0.0, "D4:4": 0.0}
