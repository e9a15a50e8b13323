"""`memplane.integrations.agentscope.MemplaneMiddleware` on a real AgentScope 2.0.11 `Agent`
whose OpenAI chat model is the scripted OpenAI-compatible server on loopback
(tests/fake_llm.py), against the session's real memplane server: the model's tool calls
reach memplane, their results reach the model's next prompt, turns are written back and
found by the next session's static retrieval, sessions stay apart, a dead server costs
the reply nothing, and AgentScope's context compression is done by PrepareContext."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from agentscope.agent import Agent, ContextConfig
from agentscope.credential import OpenAICredential
from agentscope.event import ReplyFinishedReason
from agentscope.message import (
    AssistantMsg,
    HintBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultState,
    UserMsg,
)
from agentscope.model import OpenAIChatModel
from agentscope.tool import ToolChunk, Toolkit

from memplane.client import AsyncMemplaneClient
from memplane.client.formats import TRUNCATION_METADATA_KEY
from memplane.integrations.agentscope import (
    DEFAULT_MEMORY_SECTION_HEADER,
    DEFAULT_TOOL_INSTRUCTIONS,
    MemplaneMiddleware,
)
from memplane.v1 import memory_pb2, writeback_pb2
from tests.docs_text import fenced, read
from tests.fake_llm import Delay, FakeLLM, Respond, ToolCall, ToolCalls
from tests.fix_server import TestWorkspace

WAIT = 30.0  # seconds the first reasoning step may wait for the background search
PAGE = "docs/integrations/agentscope.md"


class SearchLog(AsyncMemplaneClient):
    """The real client, remembering the queries of every SearchMemories call it makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.searches: list[list[str]] = []

    async def search(self, queries: str | Sequence[str], **kwargs: Any) -> Any:
        self.searches.append([queries] if isinstance(queries, str) else list(queries))
        return await super().search(queries, **kwargs)


async def _agent(llm: FakeLLM, mw: MemplaneMiddleware, *, name: str = "chef", context_size: int = 128_000) -> Agent:
    model = OpenAIChatModel(
        credential=OpenAICredential(api_key="sk-test", base_url=llm.base_url),
        model="fake-model",
        stream=False,
        context_size=context_size,
    )
    toolkit = Toolkit(tools=await mw.list_tools())
    return Agent(name=name, system_prompt="You are a chef.", model=model, middlewares=[mw], toolkit=toolkit)


def _content(message: dict[str, Any]) -> str:
    """An OpenAI message's text: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content)
    return str(content or "")


def _system(request: dict[str, Any]) -> str:
    assert request["messages"][0]["role"] == "system"
    return _content(request["messages"][0])


def _text(request: dict[str, Any]) -> str:
    return "\n".join(_content(m) for m in request["messages"])


async def _memories(ws: TestWorkspace) -> list[memory_pb2.Memory]:
    return list((await ws.client.list_memories()).memories)


async def test_search_memory_sends_every_keyword_in_one_call_and_the_model_reads_the_result(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    seed = memory_pb2.Scope(user_id="alice")
    await workspace.client.add_memories(
        [
            memory_pb2.MemoryInput(scope=seed, content="alice drinks green tea every morning"),
            memory_pb2.MemoryInput(scope=seed, content="alice is allergic to peanuts"),
            memory_pb2.MemoryInput(scope=memory_pb2.Scope(user_id="bob"), content="bob drinks green tea too"),
        ]
    )
    client = SearchLog(server, workspace.key)
    mw = MemplaneMiddleware(client=client, user_id="alice", mode="agent_control")
    call = ToolCall("search_memory", {"keywords": ["tea", "allergy", "tea"], "limit": 3}, id="call_s1")
    llm.script(ToolCalls((call,)), "Green tea, and no peanuts.")
    agent = await _agent(llm, mw)

    reply = await agent.reply(UserMsg(name="alice", content="What do I drink, and what must I avoid?"))

    assert reply.get_text_content() == "Green tea, and no peanuts."
    first, second = llm.requests
    assert _system(first).endswith("\n\n" + DEFAULT_TOOL_INSTRUCTIONS)  # the hint in the system prompt
    assert {t["function"]["name"] for t in first["tools"]} >= {"search_memory", "add_memory"}
    assert client.searches == [["tea", "allergy"]]  # one SearchMemories call, the repeat dropped
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_s1"]
    result = _content(tool_msgs[0])
    assert "- alice drinks green tea every morning" in result
    assert "- alice is allergic to peanuts" in result
    assert "bob" not in result  # the user's scope only
    assert "## Relevant memories" not in _text(first)  # agent_control: no automatic retrieval
    await client.close()


async def test_add_memory_stores_each_fact_in_the_agents_session(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="carol", agent_id="chef", mode="both", write_back=False)
        facts = ["Carol is vegan.", "Carol cooks on Sundays."]
        call = ToolCall("add_memory", {"thinking": "durable diet facts", "content": facts}, id="call_a1")
        llm.script(ToolCalls((call,)), "Got it.")
        agent = await _agent(llm, mw)

        await agent.reply(UserMsg(name="carol", content="I'm vegan and I cook on Sundays."))

        tool_msgs = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
        assert "Successfully recorded 2 memories (rationale: durable diet facts)" in _content(tool_msgs[0])
        stored = await _memories(workspace)
        assert sorted(m.content for m in stored) == sorted(facts)
        assert {(m.scope.user_id, m.scope.agent_id, m.scope.session_id, m.type) for m in stored} == {
            ("carol", "chef", agent.state.session_id, memory_pb2.MEMORY_TYPE_USER)
        }


async def test_static_control_writes_the_turn_back_and_the_next_session_finds_it(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="dana", mode="static_control", retrieval_wait=WAIT)
        assert await mw.list_tools() == []
        llm.script("Noted: no meat, no nuts.", "Try a lentil curry.")
        first, second = await _agent(llm, mw), await _agent(llm, mw)

        await first.reply(UserMsg(name="dana", content="I'm vegetarian and allergic to nuts."))
        stored = await _memories(workspace)
        # The user's statement, extracted (no LLM on the server: its rules); the assistant's
        # reply stays in the transcript only (tests/e2e/test_agentscope_middleware_memories.py).
        assert {(m.scope.user_id, m.scope.session_id, m.content) for m in stored} == {
            ("dana", first.state.session_id, "I'm vegetarian and allergic to nuts."),
        }
        reply = await second.reply(UserMsg(name="dana", content="What should I cook tonight?"))

    assert reply.get_text_content() == "Try a lentil curry."
    assert _system(llm.requests[0]) == "You are a chef."  # no tool hint in static_control
    assert DEFAULT_MEMORY_SECTION_HEADER not in _text(llm.requests[0])  # nothing stored before the first turn
    recalled = _text(llm.requests[1])
    assert DEFAULT_MEMORY_SECTION_HEADER in recalled
    assert "- I'm vegetarian and allergic to nuts." in recalled
    injected = [m for m in second.state.context if m.name == "memory"]
    assert len(injected) == 1
    assert injected[0].role == "assistant"
    assert isinstance(injected[0].content[0], HintBlock)


TRIALS = 10


async def test_default_arguments_inject_the_stored_fact_into_a_one_step_reply_once(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """With no retrieval_wait given (the docs' "switching from Mem0Middleware" snippet),
    the first reasoning step waits for the search: a one-step reply (one model call)
    sees the user's fact in each of ten trials (a user each), on one line although it is
    stored twice (the turn and the server's identical extracted statement). With the old
    default (0 s: inject only if already back) it was 0 times in 10."""
    fact = "I'm vegetarian and allergic to nuts."
    injected = 0
    async with AsyncMemplaneClient(server, workspace.key) as client:
        for trial in range(TRIALS):
            user = f"jo-{trial}"
            said = [writeback_pb2.ConversationMessage(id="m1", role=memory_pb2.MESSAGE_ROLE_USER, content=fact)]
            seed = memory_pb2.Scope(user_id=user, session_id=f"seed-{trial}")
            written = await client.write_conversation(seed, said, extract=True)
            assert [m.content for m in [*written.memories, *written.extracted_memories]] == [fact, fact]
            mw = MemplaneMiddleware(client=client, user_id=user)
            llm.script("Try a lentil curry.")
            agent = await _agent(llm, mw)
            await agent.reply(UserMsg(name=user, content="What should I cook tonight?"))
            lines = [line for line in _text(llm.requests[trial]).splitlines() if line.startswith("- ")]
            assert len(lines) == len(set(lines)), lines
            injected += lines.count(f"- {fact}")
    assert len(llm.requests) == TRIALS  # one model call per reply
    assert injected == TRIALS


async def test_one_middleware_writes_each_agent_into_its_own_session(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """Two agents reply at once through one middleware (background writes)."""

    def answer(request: dict[str, Any]) -> str:
        return "Paella it is." if "paella" in _text(request) else "Ramen it is."

    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="erin", mode="both", await_write=False)
        llm.script(Respond(answer), Respond(answer))
        a, b = await _agent(llm, mw, name="a"), await _agent(llm, mw, name="b")
        assert a.state.session_id != b.state.session_id

        await asyncio.gather(
            a.reply(UserMsg(name="erin", content="I like paella.")),
            b.reply(UserMsg(name="erin", content="I like ramen.")),
        )
        await mw.flush()
        stored = await _memories(workspace)

    by_session: dict[str, set[str]] = {}
    for m in stored:
        by_session.setdefault(m.scope.session_id, set()).add(m.content)
    assert by_session == {a.state.session_id: {"I like paella."}, b.state.session_id: {"I like ramen."}}


async def test_an_interrupted_reply_is_not_written_back(server: str, workspace: TestWorkspace, llm: FakeLLM) -> None:
    """Cancelled while the model is answering, AgentScope replies with its canned notice;
    that is no turn to remember."""
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="ivy", mode="static_control")
        asked = threading.Event()

        def slow(_: dict[str, Any]) -> Delay:
            asked.set()
            return Delay(60, "too late")

        llm.script(Respond(slow))
        agent = await _agent(llm, mw)
        task = asyncio.create_task(agent.reply(UserMsg(name="ivy", content="Plan a menu.")))
        assert await asyncio.to_thread(asked.wait, WAIT)  # the model is answering
        task.cancel()
        reply = await task
        await mw.flush()

        assert reply.finished_reason == ReplyFinishedReason.INTERRUPTED
        assert reply.get_text_content() == agent.react_config.interruption_message
        assert await _memories(workspace) == []


@pytest.mark.parametrize("await_write", [True, False], ids=["inline", "background"])
async def test_a_dead_server_logs_the_failed_write_and_the_reply_stands(
    llm: FakeLLM, caplog: pytest.LogCaptureFixture, await_write: bool
) -> None:
    """The search, the compaction and the write fail (UNAVAILABLE): each logged, the reply
    unharmed (AgentScope compresses by itself); the tools answer the model with an ERROR
    result instead of raising."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = AsyncMemplaneClient(f"127.0.0.1:{port}", "mp_x_y", timeout=5.0, retry_reads=False)
    mw = MemplaneMiddleware(
        client=client,
        user_id="fay",
        mode="both",
        retrieval_wait=WAIT,
        compact_context=True,
        await_write=await_write,
    )
    llm.script("Hello fay.")
    caplog.set_level(logging.INFO, logger="memplane.integrations.agentscope")

    agent = await _agent(llm, mw)
    reply = await agent.reply(UserMsg(name="fay", content="hi"))
    await mw.flush()  # the background write, if any, has failed by now
    search_tool, add_tool = await mw.list_tools()
    searched = await search_tool(keywords=["tea"])
    added = await add_tool(thinking="t", content=["fay likes tea"], _agent_state=agent.state)

    assert reply.get_text_content() == "Hello fay."
    records = [r for r in caplog.records if r.name == "memplane.integrations.agentscope"]
    assert sorted((r.levelno, r.getMessage().split(":", 1)[0]) for r in records) == [
        (logging.WARNING, "memplane context compaction failed, AgentScope's runs"),  # within its window: no LLM call
        (logging.WARNING, "memplane search failed"),
        (logging.ERROR, "memplane write-back failed"),
    ]
    assert f"session_id={agent.state.session_id} messages=2" in records[-1].getMessage()
    for chunk, prefix in ((searched, "Error retrieving memory"), (added, "Error recording memory")):
        assert isinstance(chunk, ToolChunk)
        assert chunk.state == ToolResultState.ERROR
        assert isinstance(chunk.content[0], TextBlock)
        assert chunk.content[0].text.startswith(prefix)
    await client.close()


async def test_context_compression_is_prepare_context(server: str, workspace: TestWorkspace, llm: FakeLLM) -> None:
    """An agent over its window: PrepareContext's summary replaces the old messages and no
    compression call reaches the model (only the reply is scripted)."""
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="gus", mode="static_control", compact_context=True)
        agent = await _agent(llm, mw, context_size=2_000)
        agent.context_config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1)
        old: list[Msg] = []
        for i in range(12):
            old.append(UserMsg(name="gus", content=f"Step {i}: we decided to simmer the stock for {i + 2} hours. " * 4))
            old.append(AssistantMsg(name="chef", content=f"Understood, stock step {i} recorded. " * 4))
        agent.state.context = list(old)
        llm.script("Serve it hot.")

        reply = await agent.reply(UserMsg(name="gus", content="What next?"))
        transcript = await client.get_transcript(agent.state.session_id)

    assert reply.get_text_content() == "Serve it hot."
    assert agent.state.summary  # the server's summary
    kept_ids = [m.id for m in agent.state.context]
    assert old[0].id not in kept_ids
    assert kept_ids[: len(kept_ids) - 2] == [m.id for m in old[len(old) - len(kept_ids) + 2 :]]  # a tail, in order
    prompt = llm.requests[0]["messages"]
    assert prompt[1]["role"] == "user"
    assert agent.state.summary in _content(prompt[1])  # AgentScope sends the summary first
    assert not any("Step 0:" in _content(m) for m in prompt[2:])
    compacted = {t.message.id for t in transcript.messages if t.compacted}
    assert old[0].id in compacted  # recorded in the session's transcript, not lost


async def test_prepare_context_cuts_an_old_tool_output_in_place(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """Within the window nothing is compacted, but an old 20 KB tool output is cut to the
    server's 3 KB limit: in the agent's own block (the stored output's reference in its
    metadata, readable whole) and in the prompt."""
    log = "\n".join(f"line {i}: " + "x" * 60 for i in range(300))
    call = ToolCallBlock(id="call_log", name="read_log", input='{"path": "app.log"}')
    result = ToolResultBlock(
        id="call_log", name="read_log", output=[TextBlock(text=log)], state=ToolResultState.SUCCESS
    )
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="hal", mode="static_control", compact_context=True)
        agent = await _agent(llm, mw)
        agent.state.context = [
            UserMsg(name="hal", content="Read the log."),
            AssistantMsg(name="chef", content=[call, result]),
            AssistantMsg(name="chef", content="The log has 300 lines."),
            UserMsg(name="hal", content="Thanks."),
            AssistantMsg(name="chef", content="You're welcome."),
        ]
        llm.script("Anything else?")

        await agent.reply(UserMsg(name="hal", content="Is the kitchen open?"))
        block = agent.state.context[1].content[1]
        assert isinstance(block, ToolResultBlock)
        truncation = block.metadata[TRUNCATION_METADATA_KEY]
        whole = await client.read_tool_result(truncation["ref"], line_count=1000)

    assert not agent.state.summary  # nothing compacted
    assert len(agent.state.context) >= 5
    assert isinstance(block.output, list)
    kept = block.output[0]
    assert isinstance(kept, TextBlock)
    assert len(kept.text.encode()) < 4096 < len(log)
    assert int(truncation["total_bytes"]) == len(log.encode())
    assert whole.text.rstrip("\n") == log
    sent = [m for m in llm.requests[0]["messages"] if m["role"] == "tool"]
    assert [_content(m) for m in sent] == [kept.text]


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="user_id"):
        MemplaneMiddleware(client=None, user_id=" ")
    with pytest.raises(ValueError, match="mode"):
        MemplaneMiddleware(user_id="x", mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        MemplaneMiddleware(user_id="x", top_k=0)
    with pytest.raises(ValueError, match="threshold"):
        MemplaneMiddleware(user_id="x", threshold=1.5)


def _readme_example() -> str:
    """The first Python block of docs/integrations/agentscope.md."""
    return fenced(read(PAGE), "python")[0]


async def test_the_readme_example_runs_and_its_second_session_recalls_the_first(
    server: str, workspace: TestWorkspace, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As written, with the environment naming the test server and the scripted model;
    its middleware makes its own client from MEMPLANE_TARGET / MEMPLANE_API_KEY."""
    monkeypatch.setenv("MEMPLANE_TARGET", server)
    monkeypatch.setenv("MEMPLANE_API_KEY", workspace.key)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    llm.script("Noted: no meat, no nuts.", "Try a lentil curry.")
    code = compile(_readme_example(), PAGE, "exec")

    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, {"__name__": "__main__"})  # noqa: S102 - the docs' own example
        return out.getvalue()

    printed = await asyncio.to_thread(run)

    assert printed.splitlines() == ["Noted: no meat, no nuts.", "Try a lentil curry."]
    assert _system(llm.requests[0]).endswith(DEFAULT_TOOL_INSTRUCTIONS)
    assert "- I'm vegetarian and allergic to nuts." in _text(llm.requests[1])
    stored = await _memories(workspace)
    assert [(m.scope.user_id, m.content) for m in stored] == [("alice", "I'm vegetarian and allergic to nuts.")]
