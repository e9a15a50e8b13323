"""What `MemplaneMiddleware` remembers of its turns, on a real AgentScope `Agent` whose model
is the scripted OpenAI-compatible server (tests/fake_llm.py), against the session's
memplane server (no LLM: its rules extractor): with default arguments, five sessions of
a user's facts between acknowledgements and an assistant's filler store the facts and
none of the filler, the transcripts keeping every word (mem0's add(infer=True), what the
stock Mem0Middleware stores); `store_turns=True` keeps each turn as an episodic memory too."""

from __future__ import annotations

from agentscope.message import UserMsg

from memplane.client import AsyncMemplaneClient
from memplane.integrations.agentscope import MemplaneMiddleware
from memplane.v1 import filter_pb2, memory_pb2
from tests.e2e.test_agentscope_middleware import _agent
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace
from tests.support import FACTS, FILLER, SESSIONS, list_all


async def test_default_arguments_store_the_users_facts_and_none_of_the_filler(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="rita")
        llm.script(*(reply for _, reply in SESSIONS))
        sessions = []
        for said, reply in SESSIONS:
            agent = await _agent(llm, mw)  # a new agent each time: a new session
            answer = await agent.reply(UserMsg(name="rita", content=said))
            assert answer.get_text_content() == reply
            sessions.append(agent.state.session_id)
        stored = await list_all(client, filter_pb2.MemoryFilter(user_id="rita"))
        transcripts = [await client.get_transcript(session) for session in sessions]

    assert {m.content for m in stored} == FACTS
    assert not {m.content for m in stored} & FILLER
    assert {m.type for m in stored} == {memory_pb2.MEMORY_TYPE_USER}  # no episodic turn
    said_and_replied = [
        ["".join(block.text.text for block in t.message.content) for t in transcript.messages]
        for transcript in transcripts
    ]
    assert said_and_replied == [list(session) for session in SESSIONS]  # the transcripts keep every word


async def test_store_turns_keeps_each_turn_as_an_episodic_memory_too(
    server: str, workspace: TestWorkspace, llm: FakeLLM
) -> None:
    said, reply = SESSIONS[0]
    async with AsyncMemplaneClient(server, workspace.key) as client:
        mw = MemplaneMiddleware(client=client, user_id="rita", store_turns=True)
        llm.script(reply)
        await (await _agent(llm, mw)).reply(UserMsg(name="rita", content=said))
        stored = await list_all(client, filter_pb2.MemoryFilter(user_id="rita"))

    assert sorted((memory_pb2.MemoryType.Name(m.type), m.content) for m in stored) == [
        ("MEMORY_TYPE_EPISODIC", said),
        ("MEMORY_TYPE_EPISODIC", reply),
        ("MEMORY_TYPE_USER", said),
    ]
