"""WriteConversation(extract=True) on a server without an LLM (the session server has
none): the user's first-person statements become `user` memories by fixed patterns
(`memplane.server.writeback.rules_writer`), method "episodic+rules", reconciled by key — the
same statement again is NOOP, a move supersedes the old address (still readable), a new
hobby retires nothing, and nothing crosses users; the user's instructions become
`procedural` memories, and no acknowledgement, assistant reply or tool output becomes one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format

from memplane.server.writeback.rules_writer import RULES_METHOD
from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import list_all, mem, ts

USER, ASSISTANT = memory_pb2.MESSAGE_ROLE_USER, memory_pb2.MESSAGE_ROLE_ASSISTANT
T0 = datetime(2026, 11, 13, 9, 0, tzinfo=UTC)


def scope(session: str, user: str = "ana") -> memory_pb2.Scope:
    return memory_pb2.Scope(user_id=user, agent_id="concierge", session_id=session)


def turn(id: str, role: int, content: str, days: int = 0) -> Any:
    out = writeback_pb2.ConversationMessage(id=id, role=role, content=content)  # type: ignore[arg-type]
    out.create_time.CopyFrom(ts(T0 + timedelta(days=days)))
    return out


def meta(memory: memory_pb2.Memory) -> dict[str, Any]:
    return json_format.MessageToDict(memory.metadata)


async def statements(ws: TestWorkspace, *, superseded: bool = False, user: str = "ana") -> dict[str, memory_pb2.Memory]:
    flt = filter_pb2.MemoryFilter(user_id=user, types=[memory_pb2.MEMORY_TYPE_USER], include_superseded=superseded)
    return {m.content: m for m in await list_all(ws.client, flt)}


async def test_statements_are_extracted_without_an_llm_and_reconciled_by_key(workspace: TestWorkspace) -> None:
    first = await workspace.client.write_conversation(
        scope("s1"),
        [
            turn("a1", USER, "Hi! I moved to Whitefield last month. I like hiking."),
            turn("a2", ASSISTANT, "Nice. I live in the cloud, and you should try Nandi Hills."),  # not the user
            turn("a3", USER, "Should I move to Porto?"),  # a question
        ],
        extract=True,
    )
    assert first.method == RULES_METHOD
    assert not first.HasField("extraction_job")  # never presented as the LLM path
    assert len(first.memories) == 3  # the turns, as always
    assert sorted(m.content for m in first.extracted_memories) == [
        "I like hiking.",
        "I moved to Whitefield last month.",
    ]
    home = next(m for m in first.extracted_memories if m.name == "residence")
    assert meta(home)["extracted_by"] == "rules"
    assert meta(home)["attribute"] == "residence"
    assert list(home.provenance.message_ids) == ["a1"]
    assert home.valid_from_time.ToDatetime(UTC) == T0

    later = await workspace.client.write_conversation(
        scope("s2"),
        [turn("b1", USER, "I like hiking. Now I live in Electronic City, and I like chess too.", days=7)],
        extract=True,
    )
    new_home = next(m for m in later.extracted_memories if m.name == "residence")
    assert new_home.content == "Now I live in Electronic City, and I like chess too."
    assert meta(new_home)["supersedes"] == home.id
    current = await statements(workspace)
    assert sorted(current) == ["I like hiking.", "Now I live in Electronic City, and I like chess too."]
    old = (await statements(workspace, superseded=True))["I moved to Whitefield last month."]
    assert old.HasField("valid_to_time")
    assert old.valid_to_time.ToDatetime(UTC) == T0 + timedelta(days=7)  # closed when the move was said
    hiking = [m for m in (await statements(workspace, superseded=True)).values() if m.content == "I like hiking."]
    assert len(hiking) == 1  # said again in another session: NOOP
    events = await workspace.client.list_memory_events(old.id)
    assert [e.kind for e in events][-1] == memory_pb2.EVENT_KIND_UPDATE


async def test_one_user_never_supersedes_another_and_chinese_stays_chinese(workspace: TestWorkspace) -> None:
    await workspace.client.write_conversation(scope("s1", "bob"), [turn("c1", USER, "I live in Porto.")], extract=True)
    reply = await workspace.client.write_conversation(
        scope("s1", "ana"), [turn("d1", USER, "我搬到上海了。我喜欢喝绿茶。")], extract=True
    )
    assert sorted(m.content for m in reply.extracted_memories) == ["我喜欢喝绿茶。", "我搬到上海了。"]
    assert "I live in Porto." in await statements(workspace, user="bob")  # ana's move left bob's home alone
    # A conversation of no user (agent and session only) matches no user's statements:
    # the filter's empty user_id would match every user.
    rome = [turn("f1", USER, "I live in Rome.")]
    anon = await workspace.client.write_conversation(scope("s9", ""), rome, extract=True)
    assert "supersedes" not in meta(anon.extracted_memories[0])
    assert "I live in Porto." in await statements(workspace, user="bob")
    assert all("supersedes" not in meta(m) for m in reply.extracted_memories)


async def test_a_retry_replays_the_first_reply_and_stores_nothing_more(workspace: TestWorkspace) -> None:
    messages = [turn("e1", USER, "My favourite colour is green.")]
    first = await workspace.client.write_conversation(scope("s1"), messages, extract=True, request_id="req-rules")
    again = await workspace.client.write_conversation(scope("s1"), messages, extract=True, request_id="req-rules")
    assert [m.id for m in again.extracted_memories] == [m.id for m in first.extracted_memories]
    assert [m.id for m in again.memories] == [m.id for m in first.memories]
    assert len(await statements(workspace, superseded=True)) == 1
    assert first.extracted_memories[0].name == "favourite colour"


async def test_a_users_metadata_replace_leaves_a_statement_reconciled_by_key(workspace: TestWorkspace) -> None:
    """UpdateMemory with a `metadata` mask (a tag) keeps the keys the rules step reads back
    (`extracted_by`, `statement`, `attribute`: `memplane.server.writeback.turns.RULE_KEYS`): the
    same statement again is still NOOP and a move still supersedes the tagged address.
    Before, the tag replaced them and the old home stayed current beside the new one."""
    first = await workspace.client.write_conversation(
        scope("s1"), [turn("g1", USER, "I live in Lisbon. I like sailing.")], extract=True
    )
    for memory in first.extracted_memories:
        await workspace.client.update_memory(memory.id, mem("", metadata={"tag": "profile"}), ["metadata"])
    home = next(m for m in first.extracted_memories if m.name == "residence")
    tagged = (await statements(workspace))["I live in Lisbon."]
    assert meta(tagged) == {**meta(home), "tag": "profile"}

    await workspace.client.write_conversation(
        scope("s2"), [turn("h1", USER, "I like sailing. I moved to Faro.", days=3)], extract=True
    )
    current = await statements(workspace)
    assert sorted(current) == ["I like sailing.", "I moved to Faro."]  # sailing once; Lisbon closed
    assert meta(current["I moved to Faro."])["supersedes"] == home.id


async def test_a_statement_made_episodic_is_still_a_statement_whose_type_may_change(workspace: TestWorkspace) -> None:
    """A statement's type may change (`memplane.server.writeback.turns`), also after a user made it
    EPISODIC: its metadata then names the message it was said in as a turn's does, yet it
    is no turn — a type mask alone is served as a type and metadata mask is, never refused
    as "conversation turn"."""
    first = await workspace.client.write_conversation(
        scope("s1"), [turn("k1", USER, "I live in Lisbon. I like sailing.")], extract=True
    )
    for memory in first.extracted_memories:
        episodic = mem("", type=memory_pb2.MEMORY_TYPE_EPISODIC)
        await workspace.client.update_memory(memory.id, episodic, ["type"])
    home, hobby = sorted(first.extracted_memories, key=lambda m: m.name != "residence")
    back = await workspace.client.update_memory(home.id, mem("", type=memory_pb2.MEMORY_TYPE_USER), ["type"])
    tagged = mem("", type=memory_pb2.MEMORY_TYPE_USER, metadata={"tag": "hobby"})
    both = await workspace.client.update_memory(hobby.id, tagged, ["type", "metadata"])
    assert (back.type, meta(back)) == (memory_pb2.MEMORY_TYPE_USER, meta(home))
    assert (both.type, meta(both)) == (memory_pb2.MEMORY_TYPE_USER, {**meta(hobby), "tag": "hobby"})


async def test_a_corrected_statement_is_reconciled_by_its_new_words(workspace: TestWorkspace) -> None:
    """A user's correction of a statement's words (UpdateMemory of its content; the file
    sync sends an edited memory file as its content and whole metadata) re-keys it: the
    first words said again are a new statement that supersedes the correction (before,
    a NOOP against words the memory no longer held: the user's latest word was lost), and
    the corrected words said again are NOOP (before, stored a second time)."""
    homes = {}
    for user in ("ana", "bob"):
        first = await workspace.client.write_conversation(
            scope("s1", user), [turn(f"{user}-1", USER, "I live in Lisbon.")], extract=True
        )
        (homes[user],) = first.extracted_memories
        synced = mem("I live in Porto.", metadata={**meta(homes[user]), "synced_by": "file-sync"})
        await workspace.client.update_memory(homes[user].id, synced, ["content", "metadata"])

    lisbon = await workspace.client.write_conversation(
        scope("s2", "ana"), [turn("ana-2", USER, "I live in Lisbon.", days=1)], extract=True
    )
    current = await statements(workspace, user="ana")
    assert sorted(current) == ["I live in Lisbon."]
    assert [m.id for m in lisbon.extracted_memories] == [current["I live in Lisbon."].id]
    assert meta(current["I live in Lisbon."])["supersedes"] == homes["ana"].id

    porto = await workspace.client.write_conversation(
        scope("s2", "bob"), [turn("bob-2", USER, "I live in Porto.", days=1)], extract=True
    )
    assert list(porto.extracted_memories) == []
    assert [m.id for m in (await statements(workspace, user="bob", superseded=True)).values()] == [homes["bob"].id]


TOOL = memory_pb2.MESSAGE_ROLE_TOOL
PROCEDURAL = memory_pb2.MEMORY_TYPE_PROCEDURAL
INSTRUCTIONS = [  # the user's instructions on how to act: each one `procedural` memory
    "Always run the tests with -q.",
    "Use pnpm, not npm.",
    "From now on, answer in British English.",
    "Remember to update the changelog before a release.",
    "Please never push to main directly.",
    "以后请用中文回答。",
    "用pnpm，不要用npm。",
]
NOT_INSTRUCTIONS = [  # (role, text): acknowledgements, filler, questions, and what others said
    (ASSISTANT, "Sure! I'll always run them with -q."),
    (USER, "ok"),
    (TOOL, "npm: command not found. Use pnpm instead of npm."),
    (ASSISTANT, "Saved."),
    (ASSISTANT, "A mushroom risotto."),
    (ASSISTANT, "From now on I will use pnpm, not npm."),
    (USER, "Never mind."),
    (USER, "Thanks, always good to know."),
    (USER, "Should I always use pnpm?"),
    (USER, "Sure!"),
    (USER, "好的"),
    (USER, "以后再说吧。"),
]


async def test_the_users_instructions_are_procedural_memories_and_filler_is_nothing(
    workspace: TestWorkspace,
) -> None:
    """The no-LLM extractor keeps the user's instructions on how to act ("always ...",
    "use X, not Y", "from now on ...", "remember to ...", "以后…", "用X, 不要用Y") as
    `procedural` memories beside their statements about themselves; never an
    acknowledgement, the assistant's words or a tool's output."""
    messages = [turn(f"i{i}", USER, text) for i, text in enumerate(INSTRUCTIONS)]
    messages += [turn(f"n{i}", role, text) for i, (role, text) in enumerate(NOT_INSTRUCTIONS)]
    messages.append(turn("h1", USER, "I like hiking."))
    reply = await workspace.client.write_conversation(scope("s1"), messages, extract=True, skip_episodic=True)

    extracted = {m.content: m for m in reply.extracted_memories}
    assert sorted(extracted) == sorted([*INSTRUCTIONS, "I like hiking."])
    for text in INSTRUCTIONS:
        memory = extracted[text]
        assert (memory.type, memory.name) == (PROCEDURAL, "instruction"), text
        assert meta(memory)["extracted_by"] == "rules"
        assert "attribute" not in meta(memory)  # instructions add up; none retires another
    assert extracted["I like hiking."].type == memory_pb2.MEMORY_TYPE_USER
    stored = await list_all(workspace.client, filter_pb2.MemoryFilter(user_id="ana"))
    assert sorted(m.content for m in stored) == sorted(extracted)

    again = await workspace.client.write_conversation(
        scope("s2"), [turn("j1", USER, "Use pnpm, not npm.", days=1)], extract=True, skip_episodic=True
    )
    assert list(again.extracted_memories) == []  # said again in another session: NOOP
    assert len(await list_all(workspace.client, filter_pb2.MemoryFilter(user_id="ana"))) == len(stored)
