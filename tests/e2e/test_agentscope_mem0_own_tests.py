"""AgentScope's own unit tests of `Mem0Middleware`, ported to run against memplane's mem0
facade over a real server.

A port, not a copy: AgentScope's ``tests/mem0_middleware_test.py`` (Apache-2.0) at
agentscope-ai/agentscope commit da00849f2c3db60b16edaf2371ae1d863f341ae2 (the file last
changed in 5be0b16db; the middleware's source at that commit,
``src/agentscope/middleware/_longterm_memory/_mem0/``, is byte for byte the one in the
agentscope 2.0.11 installed here). Each of its 31 cases is one test below, named after
it and in the same order, checking the same behaviours with the same expected results,
written in our own code. Where AgentScope hands the middleware a fake mem0 client
(``_FakeAsyncMem0Client``, which returns canned search results and records calls), the
middleware here gets memplane's ``AsyncMemoryClient`` on a real server (the session's
``memplane serve`` on loopback: tests/fix_server.py), wrapped only to record the
arguments of each search and add: the memories it finds are ones the test stored, and
what it writes is read back from the server. Where AgentScope uses its test-only
``MockModel``, a real ``OpenAIChatModel`` talks to the scripted OpenAI-compatible server
(tests/fake_llm.py), so "what the model saw" is the request it was sent.

What changed in the port, case by case:

- The helper cases (``_extract_query_text``, ``_extract_memory_texts``) test AgentScope's
  own functions, whatever the client: kept as they are, and the ones about a search
  response also get the facade's real response (its shape is what those helpers read).
- A failing client (AgentScope: ``search`` replaced by a mock raising "mem0 down") is a
  real refusal here: a query longer than the server's 4 KiB limit, which the server
  answers INVALID_ARGUMENT (the facade raises mem0's ``ValueError``). The write after
  the reply then reaches the same server and succeeds, so "a failed search must not
  block writes" is seen stored, not only called.
- ``test_async_method_wrapped_by_sync_decorator_accepted`` (mem0's hosted client wraps
  its async methods in a sync ``functools.wraps`` decorator): the same decorator wraps
  the facade's ``search`` and ``add``, and the middleware both accepts the client and
  answers a reply through it.
- ``test_sync_client_rejected``: memplane's own blocking ``Memory`` and ``MemoryClient``
  are the sync clients refused.
- ``test_add_memory_two_tier_fallback``: mem0's extraction can keep nothing of a fact,
  so ``add_memory`` retries with ``infer=False``. memplane's facade stores a user
  message given to ``add(infer=True)`` as it is (there is nothing for it to drop), so
  against the plain facade the first call stores the fact and the fallback never runs —
  checked first. Then, as in AgentScope's case, the first call's answer is made empty
  (the one simulated step: what mem0's LLM would answer) and the fallback
  ``add(infer=False)`` goes to the server, which stores the raw text as a ``user``
  memory.

Not ported: AgentScope's ``tests/mem0_agentscope_adapter_test.py`` (the same commit)
tests the adapters that let mem0's own ``Memory`` call AgentScope chat and embedding
models (``AgentScopeLLM``, ``AgentScopeEmbedding``, ``build_mem0_config`` and their
registration in mem0's factories). They are used only when ``Mem0Middleware`` builds a
mem0 ``AsyncMemory`` itself from ``chat_model`` / ``embedding_model``; with a ``client``
(memplane's facade) they never run, and memplane's server owns its embedder and LLM.

All 31 pass."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import MagicMock

import pytest
from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.event import ExternalExecutionResultEvent, UserConfirmResultEvent
from agentscope.message import HintBlock, Msg, ToolResultState, UserMsg
from agentscope.middleware import Mem0Middleware
from agentscope.middleware._longterm_memory._mem0._utils import _extract_memory_texts, _extract_query_text
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior
from agentscope.tool import ToolChunk, Toolkit

from memplane.compat.mem0 import AsyncMemory, AsyncMemoryClient, Memory, MemoryClient
from memplane.v1 import memory_pb2
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace

# A query the server refuses (limits.max_query_bytes is 4096): a real failing search.
TOO_LONG = "I live in Porto and I cycle to work every morning. " * 100
assert len(TOO_LONG.encode()) > 4096


class Recording(AsyncMemoryClient):
    """memplane's facade, remembering every search and add: its arguments, and what it
    answered ("result") or raised ("error")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.searches: list[dict[str, Any]] = []
        self.adds: list[dict[str, Any]] = []

    async def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        call: dict[str, Any] = {"query": query, **kwargs}
        self.searches.append(call)
        try:
            call["result"] = await super().search(query, **kwargs)
        except Exception as exc:
            call["error"] = exc
            raise
        return call["result"]  # type: ignore[no-any-return]

    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        call: dict[str, Any] = {"messages": messages, **kwargs}
        self.adds.append(call)
        try:
            call["result"] = await super().add(messages, **kwargs)
        except Exception as exc:
            call["error"] = exc
            raise
        return call["result"]  # type: ignore[no-any-return]


@pytest.fixture
async def facade(server: str, workspace: TestWorkspace) -> AsyncIterator[Recording]:
    """A recording facade client of the test's workspace, closed at teardown."""
    client = Recording(api_key=workspace.key, host=server)
    yield client
    await client.close()


def _model(llm: FakeLLM) -> OpenAIChatModel:
    credential = OpenAICredential(api_key="sk-test", base_url=llm.base_url)
    return OpenAIChatModel(credential=credential, model="fake-model", stream=False)


def _agent(llm: FakeLLM, mw: Mem0Middleware, *, name: str, prompt: str, toolkit: Toolkit, reply: str) -> Agent:
    """An agent answering *reply* once (AgentScope's ``_agent`` helpers)."""
    llm.script(reply)
    return Agent(name=name, system_prompt=prompt, model=_model(llm), toolkit=toolkit, middlewares=[mw])


def _texts(request: dict[str, Any]) -> list[str]:
    """The text of each message of an OpenAI request."""
    out = []
    for message in request["messages"]:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        out.append("\n".join(str(part.get("text", "")) for part in parts))
    return out


def _tool_names(toolkit: Toolkit) -> list[str]:
    return [t.name for g in toolkit.tool_groups for t in g.tools]


def _tool(toolkit: Toolkit, name: str) -> Any:
    return next(t for g in toolkit.tool_groups for t in g.tools if t.name == name)


def _memory_notes(context: list[Msg]) -> list[Msg]:
    return [m for m in context if m.name == "memory"]


async def _stored(workspace: TestWorkspace) -> list[memory_pb2.Memory]:
    return list((await workspace.client.list_memories()).memories)


async def _seed(client: AsyncMemory, *texts: str, user_id: str = "alice", agent_id: str | None = None) -> None:
    for text in texts:
        await client.add(text, user_id=user_id, agent_id=agent_id, infer=False)


@contextmanager
def _as_warnings() -> Iterator[list[logging.LogRecord]]:
    """WARNING and above of AgentScope's logger "as" (which does not propagate, so pytest's
    caplog never sees it): unittest's assertLogs("as", "WARNING")."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("as")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


# -- TestExtractQueryText ------------------------------------------------------------


def test_none_and_empty() -> None:
    assert _extract_query_text(None) is None
    assert _extract_query_text([]) is None


def test_single_user_msg() -> None:
    assert _extract_query_text(UserMsg("user", "hello world")) == "hello world"


async def test_list_of_user_msgs_joined(facade: Recording, llm: FakeLLM) -> None:
    """Also through a reply: the facade is searched with the joined text."""
    assert _extract_query_text([UserMsg("user", "first"), UserMsg("user", "second")]) == "first\nsecond"
    mw = Mem0Middleware(client=facade, user_id="alice", mode="static_control")
    agent = _agent(llm, mw, name="a", prompt="p", toolkit=Toolkit(), reply="ok")
    await agent.reply([UserMsg("user", "first"), UserMsg("user", "second")])
    assert [s["query"] for s in facade.searches] == ["first\nsecond"]


def test_resumption_events_return_none() -> None:
    assert _extract_query_text(UserConfirmResultEvent(reply_id="reply", confirm_results=[])) is None
    assert _extract_query_text(ExternalExecutionResultEvent(reply_id="reply", execution_results=[])) is None


# -- TestExtractMemoryTexts ----------------------------------------------------------


async def test_dict_with_results(facade: Recording) -> None:
    """The facade's real search answer is that dict; its texts come out in rank order."""
    assert _extract_memory_texts({"results": [{"memory": "a"}, {"memory": "b"}]}) == ["a", "b"]
    await _seed(facade, "alice drinks oolong tea", "alice keeps bees")
    raw = await facade.search("what tea does alice drink", filters={"user_id": "alice"}, top_k=5)
    assert isinstance(raw, dict)
    assert _extract_memory_texts(raw) == [r["memory"] for r in raw["results"]]
    assert _extract_memory_texts(raw)[0] == "alice drinks oolong tea"
    assert set(_extract_memory_texts(raw)) == {"alice drinks oolong tea", "alice keeps bees"}


def test_plain_list_of_dicts() -> None:
    assert _extract_memory_texts([{"memory": "only"}]) == ["only"]


def test_plain_list_of_strings() -> None:
    assert _extract_memory_texts({"results": ["x", "y"]}) == ["x", "y"]


async def test_none_and_garbage(facade: Recording) -> None:
    """And the facade's answer when nothing is stored normalises to [] as well."""
    assert _extract_memory_texts(None) == []
    assert _extract_memory_texts({"results": "nope"}) == []
    assert _extract_memory_texts(await facade.search("anything", filters={"user_id": "nobody"})) == []


# -- TestConstructorValidation -------------------------------------------------------


async def test_missing_user_id_raises(facade: Recording) -> None:
    for user_id in ("", "   "):
        with pytest.raises(ValueError, match="non-empty `user_id`"):
            Mem0Middleware(client=facade, user_id=user_id)


async def test_unknown_mode_raises(facade: Recording) -> None:
    with pytest.raises(ValueError, match="Unknown mode 'garbage'"):
        Mem0Middleware(client=facade, user_id="alice", mode="garbage")  # type: ignore[arg-type]


def test_neither_client_nor_models_nor_config_raises() -> None:
    with pytest.raises(ValueError, match="needs one of") as raised:
        Mem0Middleware(user_id="alice")
    assert all(word in str(raised.value) for word in ("client", "mem0_config", "chat_model"))


async def test_client_wins_over_other_backend_kwargs_with_warning(facade: Recording) -> None:
    with _as_warnings() as records:
        mw = Mem0Middleware(
            user_id="alice",
            client=facade,
            chat_model=MagicMock(),
            embedding_model=MagicMock(),
            mem0_config=MagicMock(),
        )
    assert mw._client is facade
    joined = "\n".join(r.getMessage() for r in records)
    assert all(word in joined for word in ("chat_model", "embedding_model", "mem0_config"))


async def test_client_alone_does_not_warn(facade: Recording) -> None:
    with _as_warnings() as records:
        Mem0Middleware(user_id="alice", client=facade)
    assert records == []


def test_only_one_of_chat_or_embedding_without_config_raises() -> None:
    with pytest.raises(ValueError, match="must be passed together"):
        Mem0Middleware(user_id="alice", chat_model=MagicMock())
    with pytest.raises(ValueError, match="must be passed together"):
        Mem0Middleware(user_id="alice", embedding_model=MagicMock())


# -- TestStaticControlMode -----------------------------------------------------------


async def test_retrieve_inject_write(facade: Recording, workspace: TestWorkspace, llm: FakeLLM) -> None:
    await _seed(facade, "alice loves coffee", agent_id="agent_under_test")
    seeded = len(facade.adds)
    toolkit = Toolkit()
    mw = Mem0Middleware(client=facade, user_id="alice", agent_id="agent_under_test", mode="static_control")
    agent = _agent(llm, mw, name="agent_under_test", prompt="base system prompt", toolkit=toolkit, reply="hi alice")

    reply = await agent.reply(UserMsg("user", "remind me what I like"))

    # 1. one search, mem0's call shape
    (search,) = facade.searches
    assert search["query"] == "remind me what I like"
    assert search["filters"] == {"user_id": "alice", "agent_id": "agent_under_test"}
    assert search["top_k"] == 5
    # 2. one write after the turn: the user/assistant pair, in the user's and agent's scope
    (write,) = facade.adds[seeded:]
    assert write["messages"] == [
        {"role": "user", "content": "remind me what I like"},
        {"role": "assistant", "content": "hi alice"},
    ]
    assert (write["user_id"], write["agent_id"]) == ("alice", "agent_under_test")
    assert "error" not in write
    # 3. the system prompt unchanged in static_control
    request = llm.requests[-1]
    assert request["messages"][0]["role"] == "system"
    assert _texts(request)[0] == "base system prompt"
    # 4. one assistant-role "memory" note holding one HintBlock with the stored memory
    (note,) = _memory_notes(agent.state.context)
    assert note.role == "assistant"
    (hint,) = note.get_content_blocks("hint")
    assert isinstance(hint, HintBlock)
    assert "Relevant memories" in hint.hint
    assert "alice loves coffee" in hint.hint
    # ...which the model was sent once
    assert sum("alice loves coffee" in text for text in _texts(request)) == 1
    # 5. no agent-control tools
    assert not {"search_memory", "add_memory"} & set(_tool_names(toolkit))
    assert reply.get_text_content() == "hi alice"


async def test_memory_message_lands_after_user_message(facade: Recording, llm: FakeLLM) -> None:
    await _seed(facade, "saved fact: alice's favourite colour is green")
    mw = Mem0Middleware(client=facade, user_id="alice", mode="static_control")
    agent = _agent(llm, mw, name="agent_under_test", prompt="p", toolkit=Toolkit(), reply="answer")

    await agent.reply(UserMsg("user", "tell me what you know"))

    roles_and_names = [(m.role, m.name) for m in agent.state.context]
    user_at = next(i for i, (role, name) in enumerate(roles_and_names) if role == "user" and name != "memory")
    memory_at = next(i for i, (_, name) in enumerate(roles_and_names) if name == "memory")
    assert memory_at > user_at, roles_and_names


async def test_no_memories_no_injection(facade: Recording, llm: FakeLLM) -> None:
    mw = Mem0Middleware(client=facade, user_id="alice", mode="static_control")
    agent = _agent(llm, mw, name="agent_under_test", prompt="base system prompt", toolkit=Toolkit(), reply="ok")

    await agent.reply(UserMsg("user", "hi"))

    assert facade.searches[0]["result"] == {"results": []}
    texts = _texts(llm.requests[-1])
    assert texts[0] == "base system prompt"
    assert not any("Relevant memories" in text for text in texts)
    assert _memory_notes(agent.state.context) == []
    assert len(facade.searches) == 1


async def test_search_failure_does_not_break_reply(facade: Recording, workspace: TestWorkspace, llm: FakeLLM) -> None:
    mw = Mem0Middleware(client=facade, user_id="alice", mode="static_control")
    agent = _agent(llm, mw, name="agent_under_test", prompt="p", toolkit=Toolkit(), reply="still works")

    reply = await agent.reply(UserMsg("user", TOO_LONG))

    assert reply.get_text_content() == "still works"
    (search,) = facade.searches
    assert isinstance(search["error"], ValueError)  # the server refused the query
    (write,) = facade.adds  # a failed search did not block the write...
    assert "error" not in write
    assert write["messages"][0] == {"role": "user", "content": TOO_LONG}
    # ...which the server kept: the user's statements, extracted from the turn
    stored = await _stored(workspace)
    assert stored
    assert all(m.scope.user_id == "alice" and m.content in TOO_LONG for m in stored)


async def test_scope_search_by_agent_false_drops_agent_id(
    facade: Recording, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """And, against a real store: a memory another agent wrote for the user is found."""
    await _seed(facade, "alice is allergic to peanuts", agent_id="another_agent")
    seeded = len(facade.adds)
    mw = Mem0Middleware(
        client=facade,
        user_id="alice",
        agent_id="agent_under_test",
        mode="static_control",
        scope_search_by_agent=False,
    )
    agent = _agent(llm, mw, name="agent_under_test", prompt="p", toolkit=Toolkit(), reply="ok")

    await agent.reply(UserMsg("user", "can I eat peanuts? I like green tea."))

    assert "agent_id" not in facade.searches[0]["filters"]
    (note,) = _memory_notes(agent.state.context)
    assert "alice is allergic to peanuts" in note.get_content_blocks("hint")[0].hint
    (write,) = facade.adds[seeded:]
    assert write["agent_id"] == "agent_under_test"  # the write still tags the agent
    written = {m.content: m.scope.agent_id for m in await _stored(workspace)}
    assert written["I like green tea."] == "agent_under_test"


def test_sync_client_rejected() -> None:
    """memplane's blocking `Memory` and `MemoryClient` are refused like mem0's."""
    for client in (Memory({"api_key": "mp_x_y", "target": "127.0.0.1:1"}), MemoryClient("mp_x_y", "127.0.0.1:1")):
        try:
            with pytest.raises(TypeError) as raised:
                Mem0Middleware(client=client, user_id="alice")  # type: ignore[arg-type]
            assert "AsyncMemory" in str(raised.value)
        finally:
            client.close()


def _sync_wraps_async(func: Callable[..., Any]) -> Callable[..., Any]:
    """mem0's hosted client's pattern: a sync `functools.wraps` wrapper returning the
    coroutine of the async function it wraps."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class WrappedFacade(Recording):
    """The facade with its search and add behind mem0's sync decorator."""

    @_sync_wraps_async
    async def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        return await super().search(query, **kwargs)

    @_sync_wraps_async
    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        return await super().add(messages, **kwargs)


async def test_async_method_wrapped_by_sync_decorator_accepted(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    """The sync-wrapped facade is accepted and answers a reply; so are memplane's two
    async clients as they are."""
    wrapped = WrappedFacade(api_key=workspace.key, host=server)
    plain = AsyncMemory({"api_key": workspace.key, "target": server})
    try:
        for client in (AsyncMemoryClient(client=plain._client), plain):
            assert Mem0Middleware(client=client, user_id="alice")._client is client
        mw = Mem0Middleware(client=wrapped, user_id="alice", mode="static_control")
        assert isinstance(mw._client, WrappedFacade)
        await _seed(plain, "alice takes her coffee black")
        agent = _agent(llm, mw, name="a", prompt="p", toolkit=Toolkit(), reply="black")
        assert (await agent.reply(UserMsg("user", "how do I take my coffee?"))).get_text_content() == "black"
        (note,) = _memory_notes(agent.state.context)
        assert "alice takes her coffee black" in note.get_content_blocks("hint")[0].hint
        assert len(wrapped.adds) == 1
    finally:
        await wrapped.close()
        await plain.close()


# -- TestAgentControlMode ------------------------------------------------------------


async def _tool_agent(llm: FakeLLM, mw: Mem0Middleware, *, prompt: str = "p", reply: str = "ok") -> Agent:
    """An agent whose toolkit holds the middleware's tools (AgentScope's ``_agent``)."""
    return _agent(llm, mw, name="a", prompt=prompt, toolkit=Toolkit(tools=await mw.list_tools()), reply=reply)


async def test_tools_listed_and_hint_in_prompt(facade: Recording, llm: FakeLLM) -> None:
    await _seed(facade, "alice found a four-leaf clover")
    seeded = len(facade.adds)
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    agent = await _tool_agent(llm, mw, prompt="base prompt")

    await agent.reply(UserMsg("user", "hello"))

    basic = next(g for g in agent.toolkit.tool_groups if g.name == "basic")
    assert {"search_memory", "add_memory"} <= {t.name for t in basic.tools}
    assert (facade.searches, facade.adds[seeded:]) == ([], [])  # no automatic search or write
    request = llm.requests[-1]
    prompt = _texts(request)[0]
    assert all(word in prompt for word in ("base prompt", "Long-term memory", "search_memory", "add_memory"))
    assert not any("Relevant memories" in text for text in _texts(request))
    assert _memory_notes(agent.state.context) == []


async def test_middleware_does_not_mutate_toolkit(facade: Recording, llm: FakeLLM) -> None:
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    toolkit = Toolkit()
    agent = _agent(llm, mw, name="a", prompt="base prompt", toolkit=toolkit, reply="ok")

    await agent.reply(UserMsg("user", "hello"))

    assert not {"search_memory", "add_memory"} & set(_tool_names(toolkit))


async def test_search_memory_tool_invokes_mem0(facade: Recording, llm: FakeLLM) -> None:
    await _seed(facade, "alice likes green tea", "alice prefers window seats", agent_id="a")
    mw = Mem0Middleware(client=facade, user_id="alice", agent_id="a", mode="agent_control")
    agent = await _tool_agent(llm, mw, prompt="base prompt")
    await agent.reply(UserMsg("user", "hi"))
    search_tool = _tool(agent.toolkit, "search_memory")

    chunk = await search_tool(keywords=["what does alice like?", "alice preferences"], limit=3)

    text = chunk.content[0].text
    assert "alice likes green tea" in text
    assert "alice prefers window seats" in text
    assert len(facade.searches) == 2  # one per keyword
    for call in facade.searches:
        assert call["filters"] == {"user_id": "alice", "agent_id": "a"}
        assert call["top_k"] == 3


async def test_async_search_accepts_per_call_top_k(facade: Recording) -> None:
    """And the server answers at most that many."""
    await _seed(facade, *(f"alice's note number {i} about tea" for i in range(5)), agent_id="a")
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control", top_k=9)

    found = await mw._async_search("q", user_id="alice", agent_id="a", top_k=3)

    assert facade.searches[0]["top_k"] == 3
    assert len(found) == 3
    assert mw._top_k == 9


async def test_tools_auto_allow_permission(facade: Recording, llm: FakeLLM) -> None:
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    agent = await _tool_agent(llm, mw)
    await agent.reply(UserMsg("user", "hi"))

    for name in ("search_memory", "add_memory"):
        decision = await _tool(agent.toolkit, name).check_permissions({}, None)
        assert decision.behavior == PermissionBehavior.ALLOW


async def test_search_memory_dedupes_across_keywords(facade: Recording, llm: FakeLLM) -> None:
    """Both keywords find both memories (two memories, top_k 5): each is listed once."""
    await _seed(facade, "alice shares a flat with two cats", "alice has a unique vintage bicycle")
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    agent = await _tool_agent(llm, mw)
    await agent.reply(UserMsg("user", "hi"))

    chunk = await _tool(agent.toolkit, "search_memory")(keywords=["alice's flat", "alice's bicycle"], limit=5)

    assert [len(call["result"]["results"]) for call in facade.searches] == [2, 2]
    text = chunk.content[0].text
    assert text.count("alice shares a flat with two cats") == 1
    assert text.count("alice has a unique vintage bicycle") == 1


async def test_search_memory_failure_returns_error_chunk(facade: Recording, llm: FakeLLM) -> None:
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    agent = await _tool_agent(llm, mw)
    await agent.reply(UserMsg("user", "hi"))

    chunk = await _tool(agent.toolkit, "search_memory")(keywords=[TOO_LONG], limit=5)

    assert isinstance(chunk, ToolChunk)
    assert chunk.state == ToolResultState.ERROR
    (search,) = facade.searches
    assert str(search["error"]) in chunk.content[0].text  # the server's refusal, as the tool's error


class EmptyFirstExtraction(Recording):
    """The facade, except that add(infer=True) answers that nothing was kept, as mem0's
    extraction LLM can (the call does not reach the server)."""

    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("infer", True):
            self.adds.append({"messages": messages, **kwargs, "result": {"results": []}})
            return {"results": []}
        return await super().add(messages, **kwargs)


async def test_add_memory_two_tier_fallback(
    facade: Recording, server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    # The plain facade keeps the fact at the first call: no fallback needed.
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    agent = await _tool_agent(llm, mw)
    await agent.reply(UserMsg("user", "hi"))
    chunk = await _tool(agent.toolkit, "add_memory")(thinking="my reasoning", content=["alice plays the cello"])
    assert "Successfully recorded" in chunk.content[0].text
    (first,) = facade.adds
    assert (first["messages"][0]["role"], "infer" in first) == ("user", False)
    assert [r["memory"] for r in first["result"]["results"]] == ["alice plays the cello"]

    # An extraction that kept nothing: the tool falls back to infer=False, which stores.
    empty = EmptyFirstExtraction(api_key=workspace.key, host=server)
    try:
        mw = Mem0Middleware(client=empty, user_id="bob", mode="agent_control")
        agent = await _tool_agent(llm, mw)
        await agent.reply(UserMsg("user", "hi"))
        chunk = await _tool(agent.toolkit, "add_memory")(thinking="my reasoning", content=["fact one"])
    finally:
        await empty.close()
    assert "Successfully recorded" in chunk.content[0].text
    assert len(empty.adds) == 2  # two tiers
    assert [call["messages"][0]["role"] for call in empty.adds] == ["user", "user"]
    assert "infer" not in empty.adds[0]
    assert empty.adds[1]["infer"] is False
    (bob,) = [m for m in await _stored(workspace) if m.scope.user_id == "bob"]
    assert (bob.content, bob.type) == ("fact one", memory_pb2.MEMORY_TYPE_USER)


async def test_add_memory_does_not_persist_thinking(facade: Recording, workspace: TestWorkspace, llm: FakeLLM) -> None:
    mw = Mem0Middleware(client=facade, user_id="alice", mode="agent_control")
    agent = await _tool_agent(llm, mw)
    await agent.reply(UserMsg("user", "hi"))
    thinking, fact = "user said X because Y", "likes coffee"

    chunk = await _tool(agent.toolkit, "add_memory")(thinking=thinking, content=[fact])

    (call,) = facade.adds  # one call: the first tier kept the fact
    sent = call["messages"][0]["content"]
    assert fact in sent
    assert thinking not in sent
    assert [m.content for m in await _stored(workspace)] == [fact]  # the server has the fact alone
    assert thinking in chunk.content[0].text  # the rationale is in the tool's answer


# -- TestBothMode --------------------------------------------------------------------


async def test_memory_msg_and_tool_hint_both_present(facade: Recording, llm: FakeLLM) -> None:
    await _seed(facade, "auto-injected: alice's cat is called Miso")
    seeded = len(facade.adds)
    mw = Mem0Middleware(client=facade, user_id="alice", mode="both")
    toolkit = Toolkit(tools=await mw.list_tools())
    agent = _agent(llm, mw, name="a", prompt="base", toolkit=toolkit, reply="ok")

    await agent.reply(UserMsg("user", "hi, what is my cat called?"))

    assert len(facade.searches) == 1
    assert len(facade.adds[seeded:]) == 1
    texts = _texts(llm.requests[-1])
    assert all(word in texts[0] for word in ("Long-term memory", "search_memory"))
    (note,) = _memory_notes(agent.state.context)
    (hint,) = note.get_content_blocks("hint")
    assert "auto-injected" in hint.hint
    assert sum("auto-injected" in text for text in texts) == 1  # the model was sent it once
    assert {"search_memory", "add_memory"} <= set(_tool_names(toolkit))
