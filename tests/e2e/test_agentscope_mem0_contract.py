"""What AgentScope 2.0.11's own unit tests of `Mem0Middleware` check of its mem0 client,
checked with memplane's mem0 facade as that client (over a real server) instead of their
in-memory fake: the call shapes (search with filters and top_k, add of the user/assistant
pair), the memory note after the user's message, nothing injected when nothing is
stored, a failing client costing the reply nothing, `scope_search_by_agent=False`,
agent_control's tools (one search per keyword, merged; add_memory storing each fact,
never the thinking) and the background write. A real
AgentScope `Agent` answers through the scripted OpenAI-compatible server (tests/fake_llm.py)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.message import HintBlock, UserMsg
from agentscope.middleware import Mem0Middleware
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior
from agentscope.tool import Toolkit

from memplane.compat.mem0 import AsyncMemoryClient
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace


class Recording(AsyncMemoryClient):
    """memplane's facade, remembering the arguments of every search and add; `added` is
    set when an add has returned (or failed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.searches: list[dict[str, Any]] = []
        self.adds: list[dict[str, Any]] = []
        self.added = asyncio.Event()

    async def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        self.searches.append({"query": query, **kwargs})
        return await super().search(query, **kwargs)

    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        self.adds.append({"messages": messages, **kwargs})
        try:
            return await super().add(messages, **kwargs)
        finally:
            self.added.set()


def _model(llm: FakeLLM) -> OpenAIChatModel:
    credential = OpenAICredential(api_key="sk-test", base_url=llm.base_url)
    return OpenAIChatModel(credential=credential, model="fake-model", stream=False)


async def _agent(llm: FakeLLM, mw: Mem0Middleware, *, tools: bool = False) -> Agent:
    toolkit = Toolkit(tools=await mw.list_tools()) if tools else Toolkit()
    return Agent(name="helper", system_prompt="base prompt", model=_model(llm), toolkit=toolkit, middlewares=[mw])


def _texts(request: dict[str, Any]) -> list[str]:
    """The text of each message of an OpenAI request."""
    out = []
    for message in request["messages"]:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        out.append("\n".join(str(part.get("text", "")) for part in parts))
    return out


async def test_static_control_searches_injects_after_the_user_message_and_writes_the_pair(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    client = Recording(api_key=workspace.key, host=server)
    await client.add("alice loves coffee", user_id="alice", agent_id="helper", infer=False)
    mw = Mem0Middleware(client=client, user_id="alice", agent_id="helper", mode="static_control")
    llm.script("hi alice")
    agent = await _agent(llm, mw)

    reply = await agent.reply(UserMsg("user", "remind me what I like to drink"))

    assert reply.get_text_content() == "hi alice"
    (search,) = client.searches
    assert (search["query"], search["filters"], search["top_k"]) == (
        "remind me what I like to drink",
        {"user_id": "alice", "agent_id": "helper"},
        5,
    )
    written = client.adds[1:]  # after the seed
    assert [(a["messages"], a["user_id"], a["agent_id"]) for a in written] == [
        (
            [
                {"role": "user", "content": "remind me what I like to drink"},
                {"role": "assistant", "content": "hi alice"},
            ],
            "alice",
            "helper",
        )
    ]
    assert "infer" not in written[0]  # mem0's default: infer=True
    sent = _texts(llm.requests[0])
    assert sent[0] == "base prompt"  # static_control adds no tool hint
    assert sum("- alice loves coffee" in text for text in sent) == 1
    names = [(m.role, m.name) for m in agent.state.context]
    user_at = names.index(("user", "user"))
    memory_at = names.index(("assistant", "memory"))
    assert memory_at > user_at
    note = agent.state.context[memory_at]
    (hint,) = note.get_content_blocks("hint")
    assert isinstance(hint, HintBlock)
    assert "Relevant memories" in hint.hint
    await client.close()


async def test_nothing_stored_nothing_injected(server: str, workspace: TestWorkspace, llm: FakeLLM) -> None:
    client = Recording(api_key=workspace.key, host=server)
    mw = Mem0Middleware(client=client, user_id="nobody", mode="static_control")
    llm.script("ok")
    agent = await _agent(llm, mw)

    await agent.reply(UserMsg("user", "hi"))

    assert len(client.searches) == 1
    assert all(m.name != "memory" for m in agent.state.context)
    assert not any("Relevant memories" in text for text in _texts(llm.requests[0]))
    await client.close()


async def test_a_dead_memplane_costs_the_reply_nothing(llm: FakeLLM) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Recording(api_key="mp_x_y", host=f"127.0.0.1:{port}", timeout=5.0)
    mw = Mem0Middleware(client=client, user_id="alice", mode="static_control")
    llm.script("still works")
    agent = await _agent(llm, mw)

    reply = await agent.reply(UserMsg("user", "ping"))

    assert reply.get_text_content() == "still works"
    assert len(client.searches) == 1
    assert len(client.adds) == 1  # the failed search did not stop the write (which failed too, logged)
    await client.close()


async def test_scope_search_by_agent_false_searches_the_user_and_still_writes_the_agent(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    client = Recording(api_key=workspace.key, host=server)
    mw = Mem0Middleware(
        client=client, user_id="alice", agent_id="helper", mode="static_control", scope_search_by_agent=False
    )
    llm.script("Noted.")
    agent = await _agent(llm, mw)

    await agent.reply(UserMsg("user", "I like green tea."))

    assert client.searches[0]["filters"] == {"user_id": "alice"}
    assert client.adds[0]["agent_id"] == "helper"
    (stored,) = (await workspace.client.list_memories()).memories
    assert (stored.content, stored.scope.user_id, stored.scope.agent_id) == ("I like green tea.", "alice", "helper")
    await client.close()


async def test_agent_control_lists_tools_nudges_the_prompt_and_does_no_automatic_io(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    client = Recording(api_key=workspace.key, host=server)
    mw = Mem0Middleware(client=client, user_id="alice", mode="agent_control")
    llm.script("ok")
    agent = await _agent(llm, mw, tools=True)

    await agent.reply(UserMsg("user", "hello"))

    assert (client.searches, client.adds) == ([], [])
    system = _texts(llm.requests[0])[0]
    assert system.startswith("base prompt")
    assert all(word in system for word in ("Long-term memory", "search_memory", "add_memory"))
    assert {t["function"]["name"] for t in llm.requests[0]["tools"]} >= {"search_memory", "add_memory"}
    assert all(m.name != "memory" for m in agent.state.context)
    search_tool, add_tool = await mw.list_tools()
    for tool in (search_tool, add_tool):
        assert (await tool.check_permissions({}, None)).behavior == PermissionBehavior.ALLOW
    await client.close()


async def test_search_memory_asks_once_per_keyword_and_merges_the_hits(server: str, workspace: TestWorkspace) -> None:
    client = Recording(api_key=workspace.key, host=server)
    for text in ("alice drinks green tea", "alice is allergic to peanuts"):
        await client.add(text, user_id="alice", agent_id="a", infer=False)
    mw = Mem0Middleware(client=client, user_id="alice", agent_id="a", mode="agent_control", top_k=9)
    search_tool = next(t for t in await mw.list_tools() if t.name == "search_memory")

    chunk = await search_tool(keywords=["green tea", "tea alice drinks"], limit=3)

    text = chunk.content[0].text
    assert text.count("alice drinks green tea") == 1  # found by both keywords, listed once
    assert [(c["filters"], c["top_k"]) for c in client.searches] == [({"user_id": "alice", "agent_id": "a"}, 3)] * 2
    assert mw._top_k == 9  # a per-call limit changes nothing of the middleware
    await client.close()


async def test_add_memory_stores_each_fact_in_one_call_and_never_the_thinking(
    server: str, workspace: TestWorkspace
) -> None:
    """The tool adds one user message (infer=True) per call: not a conversation, so the
    facade stores it as given and the tool's infer=False retry (for an extraction that
    kept nothing) is never needed. `thinking` stays in the tool's answer."""
    client = Recording(api_key=workspace.key, host=server)
    mw = Mem0Middleware(client=client, user_id="alice", mode="agent_control")
    add_tool = next(t for t in await mw.list_tools() if t.name == "add_memory")

    said = await add_tool(thinking="stated preference", content=["I like oolong tea."])
    noted = await add_tool(thinking="user said X because Y", content=["alice likes coffee"])

    assert "Successfully recorded" in said.content[0].text
    assert "because Y" in noted.content[0].text
    assert [(a.get("infer", True), a["messages"][0]["role"]) for a in client.adds] == [(True, "user")] * 2
    stored = {m.content for m in (await workspace.client.list_memories()).memories}
    assert stored == {"I like oolong tea.", "alice likes coffee"}
    await client.close()


async def test_await_write_false_writes_in_the_background(server: str, workspace: TestWorkspace, llm: FakeLLM) -> None:
    client = Recording(api_key=workspace.key, host=server)
    mw = Mem0Middleware(client=client, user_id="bea", mode="static_control", await_write=False)
    llm.script("Noted.")
    agent = await _agent(llm, mw)

    await agent.reply(UserMsg("user", "I live in Porto."))
    await asyncio.wait_for(client.added.wait(), timeout=30)

    (stored,) = (await workspace.client.list_memories()).memories
    assert (stored.content, stored.scope.user_id) == ("I live in Porto.", "bea")
    await client.close()
