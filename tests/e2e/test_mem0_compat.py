"""`memplane.compat.mem0` over real gRPC: result dicts with mem0 2.2.1's keys, mem0's
filter dicts as memplane filters, run_id as the session, scopes kept apart, and mem0's
ValueErrors where mem0 raises them."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import datetime

import pytest

from memplane.compat.mem0 import AsyncMemory, AsyncMemoryClient, MemoryNotFoundError, ValidationError
from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace

# mem0 2.2.1 MemoryItem.model_dump() plus the promoted payload keys.
ITEM_KEYS = {"id", "memory", "hash", "metadata", "score", "created_at", "updated_at"}
MISSING_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def memory(workspace: TestWorkspace) -> AsyncMemory:
    return AsyncMemory(client=workspace.client)


async def test_items_have_mem0s_keys_in_search_get_and_get_all(memory: AsyncMemory) -> None:
    added = await memory.add(
        [{"role": "user", "content": "I drink oolong tea", "name": "Ana"}],
        user_id="ana",
        agent_id="barista",
        run_id="s1",
        metadata={"topic": "drinks", "rating": 5, "user_id": "mallory"},
        infer=False,
    )
    (row,) = added["results"]
    assert row == {"id": row["id"], "memory": "I drink oolong tea", "event": "ADD", "actor_id": "Ana", "role": "user"}

    (hit,) = (await memory.search("tea", filters={"user_id": "ana"}))["results"]
    assert set(hit) == ITEM_KEYS | {"user_id", "agent_id", "run_id", "actor_id", "role"}
    assert (hit["user_id"], hit["agent_id"], hit["run_id"]) == ("ana", "barista", "s1")
    assert hit["metadata"] == {"topic": "drinks", "rating": 5}  # identity keys dropped, as mem0 does
    assert hit["hash"] == hashlib.md5(b"I drink oolong tea").hexdigest()  # noqa: S324 - mem0's hash
    assert datetime.fromisoformat(hit["created_at"]).utcoffset() is not None
    assert 0 <= hit["score"] <= 1

    got = await memory.get(row["id"])
    assert got is not None
    assert got["score"] is None
    assert {k: v for k, v in got.items() if k != "score"} == {k: v for k, v in hit.items() if k != "score"}
    (listed,) = (await memory.get_all(filters={"run_id": "s1"}))["results"]
    assert "score" not in listed
    assert listed == {k: v for k, v in got.items() if k != "score"}


async def test_threshold_keeps_the_exact_match_under_the_servers_default_terms(memory: AsyncMemory) -> None:
    """mem0's threshold= is SearchMemories min_score: the query's best candidate scores 1
    with the query-aware terms on (it scored 1 / 2.4, and threshold=0.5 returned [])."""
    await memory.add("I drink oolong tea every morning", user_id="t", infer=False)
    hits = (await memory.search("I drink oolong tea every morning", user_id="t", threshold=0.5))["results"]
    assert [(h["memory"], h["score"]) for h in hits] == [("I drink oolong tea every morning", 1.0)]


async def test_infer_true_of_a_conversation_stores_its_facts_and_of_a_text_the_text(
    memory: AsyncMemory, workspace: TestWorkspace
) -> None:
    """A conversation (an assistant turn among the messages) is extracted by the server
    (without an LLM: the user's statements), never stored turn by turn; a text is stored
    as it is (episodic)."""
    result = await memory.add(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "my cat is Tom"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hi Tom's owner"}]},
        ],
        user_id="u",
        metadata={"topic": "pets"},
    )
    (row,) = result["results"]
    assert {k: row[k] for k in ("memory", "event")} == {"memory": "my cat is Tom", "event": "ADD"}
    stored = (await workspace.client.list_memories()).memories
    assert [(m.content, m.type, m.metadata["topic"]) for m in stored] == [("my cat is Tom", 1, "pets")]  # USER
    await memory.add("hello there", user_id="u")
    stored = (await workspace.client.list_memories()).memories
    assert sorted((m.content, m.type) for m in stored) == [("hello there", 7), ("my cat is Tom", 1)]  # 7: EPISODIC


async def test_filters_map_to_memplane_metadata_filters(memory: AsyncMemory) -> None:
    for text, meta in (
        ("alpha note", {"kind": "a", "n": 1}),
        ("beta note", {"kind": "b", "n": 2}),
        ("gamma note", {"kind": "c", "n": 3, "pinned": True}),
    ):
        await memory.add(text, user_id="f", metadata=meta, infer=False)

    async def found(filters: dict[str, object]) -> set[str]:
        hits = (await memory.search("note", filters={"user_id": "f", **filters}))["results"]
        return {h["memory"] for h in hits}

    assert await found({"kind": "a"}) == {"alpha note"}
    assert await found({"kind": {"in": ["a", "c"]}}) == {"alpha note", "gamma note"}
    assert await found({"kind": {"nin": ["a", "c"]}}) == {"beta note"}
    assert await found({"n": {"gte": 2, "lt": 3}}) == {"beta note"}
    assert await found({"kind": {"ne": "b"}}) == {"alpha note", "gamma note"}
    assert await found({"pinned": "*"}) == {"gamma note"}
    assert await found({"OR": [{"kind": "a"}, {"n": 3}]}) == {"alpha note", "gamma note"}
    assert await found({"AND": [{"kind": {"in": ["a", "b"]}}, {"n": {"gt": 1}}]}) == {"beta note"}
    assert await found({"NOT": [{"kind": "a"}]}) == {"beta note", "gamma note"}
    with pytest.raises(ValidationError, match="icontains"):
        await found({"kind": {"icontains": "A"}})


async def test_scopes_stay_apart_and_delete_all_erases_one(memory: AsyncMemory) -> None:
    await memory.add("alice likes jazz", user_id="alice")
    await memory.add("bob likes jazz", user_id="bob")
    await memory.add("alice session note", user_id="alice", run_id="r1")

    assert {h["memory"] for h in (await memory.search("jazz", user_id="bob"))["results"]} == {"bob likes jazz"}
    assert [h["memory"] for h in (await memory.get_all(filters={"run_id": "r1"}))["results"]] == ["alice session note"]
    assert len((await memory.get_all(user_id="alice", limit=1))["results"]) == 1

    assert await memory.delete_all(user_id="alice") == {"message": "Memories deleted successfully!"}
    assert (await memory.get_all(user_id="alice"))["results"] == []
    assert [h["memory"] for h in (await memory.get_all(user_id="bob"))["results"]] == ["bob likes jazz"]
    await memory.reset(user_id="bob")
    assert (await memory.get_all(user_id="bob"))["results"] == []


async def test_update_keeps_role_and_history_records_it(memory: AsyncMemory) -> None:
    (row,) = (await memory.add({"role": "user", "content": "I live in Lyon"}, user_id="u", infer=False))["results"]
    assert await memory.update(row["id"], text="I live in Paris") == {"message": "Memory updated successfully!"}
    await memory.update(row["id"], metadata={"city": "Paris"})
    got = await memory.get(row["id"])
    assert got is not None
    assert (got["memory"], got["metadata"], got["role"]) == ("I live in Paris", {"city": "Paris"}, "user")
    history = await memory.history(row["id"])
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
        ("ADD", None, "I live in Lyon"),
        ("UPDATE", "I live in Lyon", "I live in Paris"),
        ("UPDATE", "I live in Paris", "I live in Paris"),
    ]
    assert set(history[0]) == {
        "id",
        "memory_id",
        "old_memory",
        "new_memory",
        "event",
        "created_at",
        "updated_at",
        "is_deleted",
        "actor_id",
        "role",
    }
    assert await memory.delete(row["id"]) == {"message": "Memory deleted successfully!"}
    assert (await memory.history(row["id"]))[-1]["is_deleted"] is True


async def test_update_of_a_conversation_turns_metadata_keeps_it_that_turns_memory(
    memory: AsyncMemory, workspace: TestWorkspace
) -> None:
    """A turn written by WriteConversation (an AgentScope middleware's, say) is context of
    its neighbours while its memory names the turn (metadata message_id, speaker,
    turn_time). mem0's update(metadata=) merges into the stored metadata, and the server
    keeps the message's own keys it does not name, as mem0 keeps role: tagging a turn must
    not drop it from the context of the turns around it."""
    scope = memory_pb2.Scope(user_id="dora", session_id="s-dora")
    turns = [("d1", "I grow tomatoes"), ("d2", "I saw a quokka today"), ("d3", "I sing in a choir")]
    written = await workspace.client.write_conversation(
        scope,
        [
            writeback_pb2.ConversationMessage(id=i, role=memory_pb2.MESSAGE_ROLE_USER, name="Dora", content=t)
            for i, t in turns
        ],
    )
    await memory.update(written.memories[0].id, metadata={"tag": "garden"})
    got = await memory.get(written.memories[0].id)
    assert got is not None
    assert got["role"] == "user"
    assert {k: got["metadata"].get(k) for k in ("tag", "message_id", "speaker")} == {
        "tag": "garden",
        "message_id": "d1",
        "speaker": "Dora",
    }
    reply = await workspace.client.search(
        "quokka", top_k=1, context_turns=1, filter=filter_pb2.MemoryFilter(user_id="dora")
    )
    assert reply.hits[0].memory.content == "I saw a quokka today"
    assert [(c.message_id, c.content) for c in reply.hits[0].context] == [("d1", turns[0][1]), ("d3", turns[2][1])]
    # A key the new metadata names is the user's correction, as in mem0 ("only if not
    # provided"): the speaker changes, the tag it does not name stays (merged), the turn
    # stays d2's context.
    await memory.update(written.memories[0].id, metadata={"speaker": "Dorothy", "role": "assistant"})
    got = await memory.get(written.memories[0].id)
    assert got is not None
    assert (got["role"], got["metadata"].get("speaker"), got["metadata"].get("tag")) == (
        "assistant",
        "Dorothy",
        "garden",
    )
    again = await workspace.client.search(
        "quokka", top_k=1, context_turns=1, filter=filter_pb2.MemoryFilter(user_id="dora")
    )
    assert [c.message_id for c in again.hits[0].context] == ["d1", "d3"]
    # A message_id of another turn would make it no turn's: mem0's ValidationError.
    with pytest.raises(ValidationError, match="message_id"):
        await memory.update(written.memories[0].id, metadata={"message_id": "d9"})


async def test_errors_are_mem0s_value_errors(memory: AsyncMemory, workspace: TestWorkspace) -> None:
    assert await memory.get(MISSING_ID) is None
    with pytest.raises(MemoryNotFoundError):
        await memory.delete(MISSING_ID)
    with pytest.raises(ValueError, match="not found"):
        await memory.update(MISSING_ID, text="x")
    with pytest.raises(ValueError, match="at least one of 'user_id', 'agent_id', or 'run_id'"):
        await memory.add("orphan")
    with pytest.raises(ValueError, match="filters must contain at least one of"):
        await memory.search("anything")
    with pytest.raises(ValueError, match="whitespace"):
        await memory.add("x", user_id="two words")
    with pytest.raises(ValueError, match="empty"):
        await memory.search("  ", user_id="u")
    with pytest.raises(ValueError, match="top_k"):
        await memory.search("x", user_id="u", top_k=-1)
    for threshold in (-0.1, 1.5, float("nan"), float("inf")):  # named as the caller wrote it, not min_score
        with pytest.raises(ValidationError, match=r"^Invalid threshold"):
            await memory.search("x", user_id="u", threshold=threshold)
    with pytest.raises(ValueError, match="At least one filter"):
        await memory.delete_all()
    with pytest.raises(ValidationError, match="reset"):
        await memory.reset()
    with pytest.raises(ValidationError):  # the server's own refusal: content over the limit
        await memory.add("x" * 40_000, user_id="u", infer=False)
    platform = AsyncMemoryClient(client=workspace.client)
    with pytest.raises(MemoryNotFoundError):
        await platform.get(MISSING_ID)


async def test_construction_reads_memplane_settings(
    server: str, workspace: TestWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MEMPLANE_TARGET", "MEMPLANE_API_KEY", "MEM0_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="API key"):
        AsyncMemoryClient()
    with pytest.raises(ValueError, match="MEMPLANE_TARGET"):
        AsyncMemory()
    with pytest.raises(ValueError, match="unknown config keys"):
        AsyncMemory.from_config({"target": server, "api_key": workspace.key, "colour": "blue"})

    mem0_style = {"vector_store": {"provider": "qdrant"}, "llm": {"provider": "openai"}}
    async with AsyncMemory.from_config({"target": server, "api_key": workspace.key, **mem0_style}) as m:
        await m.add("configured in code", user_id="c")
    async with AsyncMemoryClient(api_key=workspace.key, host=server) as c:
        assert [h["memory"] for h in (await c.search("code", user_id="c"))["results"]] == ["configured in code"]
    monkeypatch.setenv("MEMPLANE_TARGET", server)
    monkeypatch.setenv("MEMPLANE_API_KEY", workspace.key)
    async with AsyncMemory() as m:
        assert len((await m.get_all(user_id="c"))["results"]) == 1


async def test_a_client_made_before_the_loop_works_inside_it(server: str, workspace: TestWorkspace) -> None:
    """mem0 code makes its client at import time, then runs `asyncio.run(main())`: the
    gRPC channel is opened on the loop that uses it (a grpc.aio channel made before
    would fail with "attached to a different loop")."""

    def script() -> list[str]:
        client = AsyncMemoryClient(api_key=workspace.key, host=server)  # no running loop in this thread

        async def main() -> list[str]:
            async with client:
                await client.add("made before the loop", user_id="early")
                return [h["memory"] for h in (await client.search("loop", user_id="early"))["results"]]

        return asyncio.run(main())

    assert await asyncio.to_thread(script) == ["made before the loop"]
