"""WriteConversation(extract=True, skip_episodic=True): the messages go to the transcript
only and the memories are what extraction makes — without an LLM the user's statements
(rules), with one the LLM's facts — never a raw turn: five sessions of a user's facts
between acknowledgements and an assistant's filler store the facts and none of the filler."""

from __future__ import annotations

from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.compat.mem0 import AsyncMemory
from memplane.errors import InvalidArgumentError
from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2
from tests.e2e.test_extraction import answer, fact
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace
from tests.support import FACTS, FILLER, SESSIONS, list_all

USER, ASSISTANT = memory_pb2.MESSAGE_ROLE_USER, memory_pb2.MESSAGE_ROLE_ASSISTANT


def _turn(session: int, said: str, reply: str) -> list[Any]:
    return [
        writeback_pb2.ConversationMessage(id=f"u{session}", role=USER, content=said),
        writeback_pb2.ConversationMessage(id=f"a{session}", role=ASSISTANT, content=reply),
    ]


async def test_without_an_llm_five_sessions_store_the_users_statements_and_no_filler(
    workspace: TestWorkspace,
) -> None:
    methods = set()
    for i, (said, reply) in enumerate(SESSIONS):
        scope = memory_pb2.Scope(user_id="rita", session_id=f"s{i}")
        written = await workspace.client.write_conversation(
            scope, _turn(i, said, reply), extract=True, skip_episodic=True
        )
        assert list(written.memories) == []  # no episodic memory per turn
        assert written.transcript_message_count == 2  # the transcript keeps every word
        methods.add(written.method)
    stored = await list_all(workspace.client, filter_pb2.MemoryFilter(user_id="rita"))
    assert {m.content for m in stored} == FACTS
    assert not {m.content for m in stored} & FILLER
    assert {m.type for m in stored} == {memory_pb2.MEMORY_TYPE_USER}
    assert methods == {"rules (no LLM is configured on this server: first-person statements and instructions only)"}
    transcript = await workspace.client.get_transcript("s3")
    assert [t.message.id for t in transcript.messages] == ["u3", "a3"]


async def test_the_mem0_facade_keeps_the_users_instructions_without_an_llm(workspace: TestWorkspace) -> None:
    """add(infer=True) of an exchange with no LLM on the server: the user's instruction as a
    `procedural` memory, the assistant's "Sure!" as nothing."""
    memory = AsyncMemory(client=workspace.client)
    exchange = [{"role": "user", "content": "ok. Use pnpm, not npm."}, {"role": "assistant", "content": "Sure!"}]

    added = await memory.add(exchange, user_id="rita")

    assert [(row["memory"], row["event"]) for row in added["results"]] == [("Use pnpm, not npm.", "ADD")]
    stored = await list_all(workspace.client, filter_pb2.MemoryFilter(user_id="rita"))
    assert [(m.content, m.type) for m in stored] == [("Use pnpm, not npm.", memory_pb2.MEMORY_TYPE_PROCEDURAL)]


async def test_skip_episodic_needs_extract(workspace: TestWorkspace) -> None:
    scope = memory_pb2.Scope(user_id="rita", session_id="s")
    with pytest.raises(InvalidArgumentError, match="skip_episodic"):
        await workspace.client.write_conversation(scope, _turn(0, "I like tea.", "ok"), skip_episodic=True)


async def test_with_an_llm_only_its_facts_are_stored(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    llm.script(answer(fact("user", "Diet", "Rita is vegetarian and allergic to nuts.", ids=["u0"])))
    scope = memory_pb2.Scope(user_id="rita", session_id="s0")
    said, reply = SESSIONS[0]

    written = await llm_client.write_conversation(
        scope, _turn(0, said, reply), extract=True, wait=True, skip_episodic=True
    )

    assert written.method == "llm"
    assert list(written.memories) == []
    assert written.extraction_job.status == writeback_pb2.EXTRACTION_JOB_STATUS_DONE, written.extraction_job.error
    stored = await list_all(llm_client, filter_pb2.MemoryFilter(user_id="rita"))
    assert [m.content for m in stored] == ["Rita is vegetarian and allergic to nuts."]
    assert [m.id for m in written.extracted_memories] == [m.id for m in stored]


async def test_the_mem0_facade_keeps_the_llms_facts_of_a_conversation(
    llm: FakeLLM, llm_client: AsyncMemplaneClient
) -> None:
    """add(infer=True) of a conversation on a server with an LLM: its facts, not the turns."""
    llm.script(answer(fact("user", "Diet", "Rita is vegetarian and allergic to nuts.", ids=[])))
    memory = AsyncMemory(client=llm_client)
    said, reply = SESSIONS[0]

    added = await memory.add(
        [{"role": "user", "content": said}, {"role": "assistant", "content": reply}], user_id="rita"
    )

    (row,) = added["results"]
    assert (row["memory"], row["event"]) == ("Rita is vegetarian and allergic to nuts.", "ADD")
    stored = await list_all(llm_client, filter_pb2.MemoryFilter(user_id="rita"))
    assert [m.id for m in stored] == [row["id"]]
