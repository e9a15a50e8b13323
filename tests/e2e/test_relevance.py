"""The absolute relevance over real gRPC, as mem0 and AgentScope users meet it: an
off-topic question over unrelated memories gets nothing at `threshold=0.5` (mem0 facade,
SDK min_relevance, the stock Mem0Middleware and MemplaneMiddleware), a relevant one still
gets its memory, hits keep their rank-score order, and min_relevance outside 0..1 is
INVALID_ARGUMENT naming the field. Issue 27's example: the rank score alone returned
"I love gardening tomatoes" at 1.000 for the swallow question."""

from __future__ import annotations

import asyncio
import math

import pytest
from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.message import UserMsg
from agentscope.middleware import Mem0Middleware
from agentscope.model import OpenAIChatModel

from memplane.cli.main import main as cli_main
from memplane.client import MemplaneClient
from memplane.compat.mem0 import AsyncMemory, AsyncMemoryClient
from memplane.errors import InvalidArgumentError
from memplane.integrations.agentscope import MemplaneMiddleware
from memplane.integrations.agentscope.middleware import LOCOMO_THRESHOLD
from memplane.v1 import filter_pb2
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace

OFF_TOPIC = "What is the airspeed of an unladen swallow?"
UNRELATED = ("I love gardening tomatoes", "My sister lives in Lisbon and works as a nurse")


async def _two_memories(memory: AsyncMemory, user_id: str) -> None:
    for text in UNRELATED:
        await memory.add(text, user_id=user_id, infer=False)


async def test_mem0_facade_threshold_rejects_an_off_topic_query_and_keeps_a_relevant_one(
    workspace: TestWorkspace,
) -> None:
    memory = AsyncMemory(client=workspace.client)
    await _two_memories(memory, "ana")

    assert (await memory.search(OFF_TOPIC, user_id="ana", threshold=0.5))["results"] == []
    hits = (await memory.search("Which vegetables do I grow in my garden?", user_id="ana", threshold=0.5))["results"]
    assert [h["memory"] for h in hits] == ["I love gardening tomatoes"]
    # Without a threshold (None, the facade's default) both come back: the rank score alone
    # cannot say "nothing relevant".
    assert len((await memory.search(OFF_TOPIC, user_id="ana", threshold=None))["results"]) == 2
    assert len((await memory.search(OFF_TOPIC, user_id="ana"))["results"]) == 2


async def test_default_arguments_keep_a_short_fact_asked_about_in_other_words(workspace: TestWorkspace) -> None:
    """README.md#using-it's example: "where does alice live?" against "I moved to Lisbon in
    March" scores relevance ~0 with the default model (cosine .739, as low as the off-topic
    pair above), so the facade and MemplaneMiddleware cut nothing unless asked: a default
    threshold (mem0's 0.1, or the LoCoMo pick 0.3) dropped this fact."""
    memory = AsyncMemory(client=workspace.client)
    await memory.add("I moved to Lisbon in March", user_id="alice", infer=False)
    query = "where does alice live?"
    (hit,) = (await workspace.client.search(query, filter=filter_pb2.MemoryFilter(user_id="alice"))).hits
    assert hit.relevance < 0.1  # why no threshold is on by default

    assert [h["memory"] for h in (await memory.search(query, user_id="alice"))["results"]] == [
        "I moved to Lisbon in March"
    ]
    middleware = MemplaneMiddleware(client=workspace.client, user_id="alice")
    assert await middleware.search([query], 5) == ["I moved to Lisbon in March"]


async def test_every_hit_has_a_relevance_and_min_relevance_filters_on_it(workspace: TestWorkspace) -> None:
    await _two_memories(AsyncMemory(client=workspace.client), "bo")
    flt = filter_pb2.MemoryFilter(user_id="bo")

    reply = await workspace.client.search(OFF_TOPIC, top_k=10, filter=flt)
    assert len(reply.hits) == 2
    assert reply.hits[0].score == 1.0  # the rank score: relative, its best is 1 whatever it is
    assert [h.score for h in reply.hits] == sorted((h.score for h in reply.hits), reverse=True)
    for hit in reply.hits:
        assert 0.0 <= hit.relevance < 0.5
        assert 0.0 < hit.relevance_signals.cosine < 1.0
        assert hit.relevance_signals.lexical_coverage == 0.0  # no word of the query is stored
    assert (await workspace.client.search(OFF_TOPIC, min_relevance=0.5, filter=flt)).hits == []

    relevant = await workspace.client.search("Where does my sister live?", min_relevance=0.5, filter=flt)
    assert [h.memory.content for h in relevant.hits] == [UNRELATED[1]]
    (hit,) = relevant.hits
    assert hit.relevance >= 0.5
    assert 0.0 < hit.relevance_signals.lexical_coverage <= 1.0  # "sister", "live"


def _sync_search(target: str, key: str, query: str) -> list[str]:
    with MemplaneClient(target, key) as client:
        reply = client.search(query, min_relevance=0.5, filter=filter_pb2.MemoryFilter(user_id="bo"))
        return [h.memory.content for h in reply.hits]


async def test_sync_client_and_cli_take_min_relevance(
    server: str, workspace: TestWorkspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await _two_memories(AsyncMemory(client=workspace.client), "bo")
    assert await asyncio.to_thread(_sync_search, server, workspace.key, OFF_TOPIC) == []
    assert await asyncio.to_thread(_sync_search, server, workspace.key, "Where does my sister live?") == [UNRELATED[1]]

    monkeypatch.setenv("MEMPLANE_API_KEY", workspace.key)
    argv = ["search", OFF_TOPIC, "--user-id", "bo", "--target", server]
    assert await asyncio.to_thread(cli_main, [*argv, "--min-relevance", "0.5"]) == 0
    assert capsys.readouterr().out.strip() == "no memories found"
    assert await asyncio.to_thread(cli_main, argv) == 0
    shown = capsys.readouterr().out
    assert "1.000  relevance 0.0" in shown  # the rank score says 1, the relevance says nothing relevant
    assert await asyncio.to_thread(cli_main, [*argv, "--min-relevance", "2"]) != 0
    assert "min_relevance" in capsys.readouterr().err


@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan, math.inf])
async def test_min_relevance_outside_0_to_1_is_invalid_argument_naming_the_field(
    workspace: TestWorkspace, value: float
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.search("tomatoes", min_relevance=value)
    assert [v.field for v in caught.value.violations] == ["min_relevance"]


async def test_memplane_middleware_locomo_threshold_injects_nothing_off_topic(workspace: TestWorkspace) -> None:
    await _two_memories(AsyncMemory(client=workspace.client), "cy")
    middleware = MemplaneMiddleware(client=workspace.client, user_id="cy", threshold=LOCOMO_THRESHOLD)

    assert await middleware.search([OFF_TOPIC], 5) == []
    assert await middleware.search(["Which vegetables do I grow in my garden?"], 5) == ["I love gardening tomatoes"]
    assert len(await MemplaneMiddleware(client=workspace.client, user_id="cy", threshold=None).search([OFF_TOPIC], 5))


def _agent(llm: FakeLLM, middleware: Mem0Middleware) -> Agent:
    model = OpenAIChatModel(
        credential=OpenAICredential(api_key="sk-test", base_url=llm.base_url), model="fake-model", stream=False
    )
    return Agent(name="chef", system_prompt="You are a chef.", model=model, middlewares=[middleware])


def _prompt_text(request: dict[str, object]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request["messages"])  # type: ignore[attr-defined]


async def test_stock_mem0_middleware_threshold_reaches_the_facade(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """AgentScope's own Mem0Middleware passes `threshold=` to the facade's search: nothing
    is injected for an off-topic question, the stored fact is for a relevant one."""
    await _two_memories(AsyncMemory(client=workspace.client), "dee")
    client = AsyncMemoryClient(api_key=workspace.key, host=server)
    middleware = Mem0Middleware(user_id="dee", client=client, mode="static_control", top_k=3, threshold=0.5)
    llm.script("About 11 metres per second.", "Tomatoes, you said.")

    await _agent(llm, middleware).reply(UserMsg(name="dee", content=OFF_TOPIC))
    await _agent(llm, middleware).reply(UserMsg(name="dee", content="Which vegetables do I grow in my garden?"))

    assert "Relevant memories" not in _prompt_text(llm.requests[0])
    assert "- I love gardening tomatoes" in _prompt_text(llm.requests[1])
    assert UNRELATED[1] not in _prompt_text(llm.requests[1])
    await client.close()
