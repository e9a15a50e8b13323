"""AgentScope 2.0.11's own `Mem0Middleware(user_id=..., client=AsyncMemoryClient(...))`
takes memplane's mem0 facade unchanged: a real AgentScope `Agent` whose OpenAI chat model
is a scripted OpenAI-compatible server on loopback. The first session's turn is written
back through the facade (add(infer=True): the server keeps the user's statements, never
the turns); the next session (a new agent) finds it before reasoning and the model's
prompt carries it; five sessions of facts between filler replies store the facts and
none of the filler."""

from __future__ import annotations

from typing import Any

import pytest
from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.message import UserMsg
from agentscope.middleware import Mem0Middleware
from agentscope.model import OpenAIChatModel
from agentscope.tool import Toolkit

from memplane.compat.mem0 import AsyncMemoryClient
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace
from tests.support import FACTS, FILLER, SESSIONS


def _agent(llm: FakeLLM, middleware: Mem0Middleware, toolkit: Toolkit | None = None) -> Agent:
    model = OpenAIChatModel(
        credential=OpenAICredential(api_key="sk-test", base_url=llm.base_url), model="fake-model", stream=False
    )
    return Agent(name="chef", system_prompt="You are a chef.", model=model, middlewares=[middleware], toolkit=toolkit)


def _prompt_text(request: dict[str, object]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request["messages"])  # type: ignore[attr-defined]


def _parts_text(request: dict[str, Any]) -> str:
    """The text of every message of an OpenAI request (string contents and text parts)."""
    out = []
    for message in request["messages"]:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        out.extend(str(part.get("text", "")) for part in parts)
    return "\n".join(out)


async def test_mem0_middleware_writes_back_and_the_next_session_recalls(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    client = AsyncMemoryClient(api_key=workspace.key, host=server)
    middleware = Mem0Middleware(user_id="alice", client=client, mode="static_control", top_k=3)
    llm.script("Noted: no meat, no nuts.", "Try a lentil curry.")

    first = await _agent(llm, middleware).reply(UserMsg(name="alice", content="I'm vegetarian and allergic to nuts."))
    second = await _agent(llm, middleware).reply(UserMsg(name="alice", content="What should I cook tonight?"))

    assert (first.get_text_content(), second.get_text_content()) == ("Noted: no meat, no nuts.", "Try a lentil curry.")
    assert "## Relevant memories" not in _prompt_text(llm.requests[0])  # nothing stored before the first turn
    recalled = _prompt_text(llm.requests[1])
    assert "## Relevant memories from past conversations" in recalled
    assert "- I'm vegetarian and allergic to nuts." in recalled
    stored = (await workspace.client.list_memories()).memories
    assert {(m.scope.user_id, m.content) for m in stored} == {("alice", "I'm vegetarian and allergic to nuts.")}
    await client.close()


async def test_five_sessions_store_the_users_facts_and_none_of_the_filler(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    client = AsyncMemoryClient(api_key=workspace.key, host=server)
    middleware = Mem0Middleware(user_id="rita", client=client, mode="static_control", top_k=10)
    llm.script(*(reply for _, reply in SESSIONS), "Try a spicy lentil curry.")

    for said, _ in SESSIONS:
        await _agent(llm, middleware).reply(UserMsg(name="rita", content=said))
    await _agent(llm, middleware).reply(UserMsg(name="rita", content="What should I cook tonight?"))

    stored = {m.content for m in (await workspace.client.list_memories()).memories}
    assert stored == FACTS
    assert not stored & FILLER
    recalled = [line for line in _parts_text(llm.requests[-1]).splitlines() if line.startswith("- ")]
    assert not {line.removeprefix("- ") for line in recalled} & FILLER
    assert "- I'm vegetarian and allergic to nuts." in recalled
    await client.close()


async def test_mem0_middleware_tools_search_and_add_through_the_facade(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """agent_control: the tools AgentScope builds call the facade's search (filters,
    top_k) and add (infer, then its infer=False fallback when nothing was kept)."""
    client = AsyncMemoryClient(api_key=workspace.key, host=server)
    middleware = Mem0Middleware(user_id="bob", agent_id="chef", client=client, mode="agent_control")
    await client.add("bob grows tomatoes", user_id="bob", agent_id="chef")

    assert await middleware._async_search("tomatoes", user_id="bob", agent_id="chef") == ["bob grows tomatoes"]
    added = await middleware._async_add_with_fallback("bob hates cilantro", user_id="bob", agent_id="chef")
    assert added is not None
    assert [r["memory"] for r in added["results"]] == ["bob hates cilantro"]
    assert await middleware.list_tools()
    llm.script("Hello bob.")
    reply = await _agent(llm, middleware).reply(UserMsg(name="bob", content="hi"))
    assert reply.get_text_content() == "Hello bob."
    assert "## Long-term memory" in _prompt_text(llm.requests[0])
    await client.close()


def test_mem0_middleware_refuses_nothing_of_the_facade() -> None:
    """Its constructor checks that search and add are coroutine functions."""
    with pytest.raises(TypeError, match="async"):
        Mem0Middleware(user_id="x", client=object())  # type: ignore[arg-type]
