"""Add → update (field mask, optimistic concurrency) → delete, and every read path
(search, get, list, history) agreeing at each step."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memplane.errors import InvalidArgumentError, NotFoundError, VersionConflictError
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.support import fields, list_all, mem, struct, ts, unit_vectors

LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL


async def test_after_a_delete_search_get_list_and_history_agree(workspace: TestWorkspace) -> None:
    client = workspace.client
    doomed, kept = await client.add_memories(
        [
            mem("The staging database lives on host kestrel-3", user_id="u1"),
            mem("The production database lives on host osprey-9", user_id="u1"),
        ]
    )
    assert {h.memory.id for h in (await client.search("kestrel", mode=LEXICAL)).hits} == {doomed.id}

    assert await client.delete_memory(doomed.id, expected_version=1) == doomed.id

    assert (await client.search("kestrel", mode=LEXICAL)).hits == []
    hybrid = await client.search("which host runs the staging database?", top_k=100)
    assert [h.memory.id for h in hybrid.hits] == [kept.id]
    listed = await client.list_memories(filter=filter_pb2.MemoryFilter(include_superseded=True, include_expired=True))
    assert [m.id for m in listed.memories] == [kept.id]
    assert listed.total_size == 1
    with pytest.raises(NotFoundError):
        await client.get_memory(doomed.id)
    events = await client.list_memory_events(doomed.id)
    assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_DELETE]
    assert events[-1].before == doomed
    assert not events[-1].HasField("after")
    assert events[-1].actor == f"key:{workspace.key_id}"
    assert events[0].id < events[1].id
    with pytest.raises(NotFoundError):
        await client.delete_memory(doomed.id)  # deleting twice is NOT_FOUND, not a silent success
    assert await client.get_memory(kept.id) == kept


async def test_update_with_field_mask_and_expected_version(workspace: TestWorkspace) -> None:
    client = workspace.client
    [original] = await client.add_memories(
        [
            mem(
                "Prefers tabs over spaces",
                user_id="dev",
                name="indentation",
                metadata={"lang": "go"},
                type=memory_pb2.MEMORY_TYPE_USER,
            ),
        ]
    )
    assert original.version == 1
    changes = memory_pb2.MemoryInput(
        content="Prefers spaces over tabs, four of them",
        name="IGNORED (not in mask)",
        metadata=struct({"lang": "python"}),
    )
    updated = await client.update_memory(original.id, changes, ["content", "metadata"], expected_version=1)
    assert updated.version == 2
    assert updated.content == "Prefers spaces over tabs, four of them"
    assert dict(updated.metadata) == {"lang": "python"}
    assert updated.name == "indentation"  # not in the mask: unchanged
    assert updated.scope == original.scope
    assert updated.create_time == original.create_time
    assert updated.update_time.ToDatetime() > original.update_time.ToDatetime()
    assert await client.get_memory(original.id) == updated

    with pytest.raises(VersionConflictError):
        await client.update_memory(
            original.id, memory_pb2.MemoryInput(content="stale writer"), ["content"], expected_version=1
        )
    with pytest.raises(VersionConflictError):
        await client.delete_memory(original.id, expected_version=1)
    assert await client.get_memory(original.id) == updated  # the stale writes changed nothing

    events = await client.list_memory_events(original.id)
    assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_UPDATE]
    assert not events[0].HasField("before")
    assert events[0].after == original
    assert events[1].before == original
    assert events[1].after == updated

    # The index follows the text: the new words are found, the old ones are not.
    assert [h.memory.id for h in (await client.search("four spaces", mode=LEXICAL)).hits] == [original.id]
    assert (await client.search("tabs", mode=LEXICAL)).hits[0].memory.version == 2
    assert (await client.search("go", mode=LEXICAL)).hits == []


async def test_update_without_expected_version_applies_on_top(workspace: TestWorkspace) -> None:
    [m] = await workspace.client.add_memories([mem("v1 text")])
    await workspace.client.update_memory(m.id, memory_pb2.MemoryInput(name="first"), ["name"])
    last = await workspace.client.update_memory(m.id, memory_pb2.MemoryInput(description="second"), ["description"])
    assert (last.version, last.name, last.description, last.content) == (3, "first", "second", "v1 text")


@pytest.mark.parametrize(
    ("mask", "values", "field"),
    [
        ([], memory_pb2.MemoryInput(content="x"), "update_mask"),
        (["scope"], memory_pb2.MemoryInput(content="x"), "update_mask"),
        (["id"], memory_pb2.MemoryInput(content="x"), "update_mask"),
        (["content"], memory_pb2.MemoryInput(content=""), "memory.content"),
        (["metadata"], memory_pb2.MemoryInput(metadata=struct({"session_id": "s"})), "memory.metadata"),
        (
            ["valid_to_time"],
            memory_pb2.MemoryInput(valid_to_time=ts(datetime(2000, 1, 1, tzinfo=UTC))),
            "memory.valid_to_time",
        ),
        (["type"], memory_pb2.MemoryInput(type=memory_pb2.MEMORY_TYPE_UNSPECIFIED), "memory.type"),
    ],
)
async def test_bad_updates_are_refused_and_change_nothing(
    workspace: TestWorkspace, mask: list[str], values: memory_pb2.MemoryInput, field: str
) -> None:
    [m] = await workspace.client.add_memories([mem("unchanged text", metadata={"a": 1})])
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.update_memory(m.id, values, mask)
    assert fields(caught.value) == [field]
    assert await workspace.client.get_memory(m.id) == m
    assert len(await workspace.client.list_memory_events(m.id)) == 1


async def test_superseded_and_expired_memories_are_hidden_unless_asked_for(workspace: TestWorkspace) -> None:
    now = datetime.now(UTC)
    vec = unit_vectors(4, seed=11)
    current, superseded, expired, future = await workspace.client.add_memories(
        [
            mem("Lives in Berlin", user_id="u", embedding=vec[0]),
            mem(
                "Lives in Paris",
                user_id="u",
                embedding=vec[1],
                valid_from_time=ts(now - timedelta(days=30)),
                valid_to_time=ts(now - timedelta(days=1)),
            ),
            mem("Lives in a hotel in Rome", user_id="u", embedding=vec[2], expire_time=ts(now - timedelta(seconds=1))),
            mem("Will live in Oslo", user_id="u", embedding=vec[3], valid_from_time=ts(now + timedelta(days=30))),
        ]
    )

    async def visible(**flags: bool) -> tuple[set[str], set[str]]:
        flt = filter_pb2.MemoryFilter(user_id="u", **flags)
        listed = {m.id for m in await list_all(workspace.client, flt)}
        found = await workspace.client.search("Lives in", mode=LEXICAL, filter=flt, top_k=100)
        # Over the whole workspace (here the same memories) the candidates come from the
        # GIN index through memplane_lexical_candidates, which applies validity itself.
        whole = filter_pb2.MemoryFilter(**flags)
        everywhere = await workspace.client.search("Lives in", mode=LEXICAL, filter=whole, top_k=100)
        searched = {h.memory.id for h in found.hits}
        assert {h.memory.id for h in everywhere.hits} == searched
        return listed, searched

    assert await visible() == ({current.id}, {current.id})
    both = {current.id, superseded.id, future.id}
    assert await visible(include_superseded=True) == (both, both)
    assert await visible(include_expired=True) == ({current.id, expired.id},) * 2
    everything = {current.id, superseded.id, expired.id, future.id}
    assert await visible(include_superseded=True, include_expired=True) == (everything, everything)
    # Hidden is not gone: get still returns each one as stored.
    for m in (superseded, expired, future):
        assert await workspace.client.get_memory(m.id) == m

    # Closing a fact's validity (superseding it) hides it from then on.
    closed = await workspace.client.update_memory(
        current.id, memory_pb2.MemoryInput(valid_to_time=ts(datetime.now(UTC))), ["valid_to_time"]
    )
    assert closed.HasField("valid_to_time")
    assert await visible() == (set(), set())


async def test_list_pages_through_every_memory_once(workspace: TestWorkspace) -> None:
    # One request: every row has the same create_time, so the id breaks the tie.
    stored = await workspace.client.add_memories(
        [mem(f"note {i}", embedding=v) for i, v in enumerate(unit_vectors(5, seed=12))]
    )
    seen: list[str] = []
    token, pages = "", 0
    while True:
        page = await workspace.client.list_memories(page_size=2, page_token=token)
        pages += 1
        assert page.total_size == 5
        assert len(page.memories) == (2 if pages < 3 else 1)
        seen += [m.id for m in page.memories]
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert len(seen) == len(set(seen)) == 5
    assert set(seen) == {m.id for m in stored}
    # Newest first, then by id descending within the same create_time.
    assert seen == sorted(seen, reverse=True)


async def test_list_is_newest_first_across_requests(workspace: TestWorkspace) -> None:
    first = await workspace.client.add_memories([mem("older", embedding=unit_vectors(1, seed=1)[0])])
    second = await workspace.client.add_memories([mem("newer", embedding=unit_vectors(1, seed=2)[0])])
    assert [m.id for m in await list_all(workspace.client)] == [second[0].id, first[0].id]


async def test_memory_fields_round_trip(workspace: TestWorkspace) -> None:
    item = mem(
        "Uses pnpm, never npm",
        user_id="u-7",
        agent_id="coder",
        session_id="s-1",
        type=memory_pb2.MEMORY_TYPE_PROCEDURAL,
        name="package manager",
        description="tooling preference",
        metadata={"n": 3, "x": 1.5, "tags": ["js", "tooling"], "nested": {"ok": True, "none": None}},
        provenance=memory_pb2.Provenance(session_id="s-1", message_ids=["m1", "m2"]),
    )
    [stored] = await workspace.client.add_memories([item])
    assert stored.scope == item.scope
    assert stored.type == memory_pb2.MEMORY_TYPE_PROCEDURAL
    assert (stored.name, stored.description, stored.content) == (item.name, item.description, item.content)
    assert stored.metadata == item.metadata
    assert stored.provenance == item.provenance
    assert stored.version == 1
    assert stored.create_time == stored.update_time == stored.valid_from_time
    assert not stored.HasField("valid_to_time")
    assert not stored.HasField("expire_time")
    assert await workspace.client.get_memory(stored.id) == stored
    assert await workspace.client.get_memory(stored.id.upper()) == stored  # ids are UUIDs, any case
    [default_type] = await workspace.client.add_memories([mem("no type given")])
    assert default_type.type == memory_pb2.MEMORY_TYPE_USER
