"""mem0 2.2.1's public Memory API tests, ported to `memplane.compat.mem0` over real gRPC.

Each test names the mem0 test it ports (`tests/test_main.py`, `tests/test_memory.py`,
`tests/memory/test_main.py`, `tests/test_client.py` of mem0ai/mem0) and keeps mem0's
expected result; mem0 checks them against mocked stores, these against a memplane server.
Where memplane deliberately differs the test says so, and so does the table of
docs/integrations/mem0.md#where-memplane-differs."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import timestamp_pb2

from memplane.compat.mem0 import AsyncMemory, AsyncMemoryClient, MemoryClient, ValidationError
from memplane.v1 import filter_pb2, memory_pb2
from tests.fix_server import TestWorkspace

MISSING_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def memory(workspace: TestWorkspace) -> AsyncMemory:
    return AsyncMemory(client=workspace.client)


@pytest.fixture
def platform(workspace: TestWorkspace) -> AsyncMemoryClient:
    return AsyncMemoryClient(client=workspace.client)


async def _expire_now(workspace: TestWorkspace, memory_id: str) -> None:
    """Make a memory expire a second ago through memplane's own expiry (mem0's tests
    write a past expiration_date into a mocked payload; memplane's retention sweep erases
    a memory an hour after it expires, so a long-past date cannot be shown here)."""
    when = timestamp_pb2.Timestamp()
    when.FromDatetime(datetime.now(UTC) - timedelta(seconds=1))
    await workspace.client.update_memory(memory_id, memory_pb2.MemoryInput(expire_time=when), ["expire_time"])


def _memories(result: dict[str, Any]) -> list[str]:
    return [row["memory"] for row in result["results"]]


# --- add -------------------------------------------------------------------------------


async def test_add(memory: AsyncMemory) -> None:
    """test_main.py::test_add: {"results": [{"memory", "event": "ADD", ...}]}."""
    result = await memory.add(messages=[{"role": "user", "content": "Test message"}], user_id="test_user")
    (row,) = result["results"]
    assert (row["memory"], row["event"]) == ("Test message", "ADD")


async def test_add_stores_expiration_date(memory: AsyncMemory) -> None:
    """test_main.py::test_add_stores_expiration_date: the date is stored with the memory
    and promoted into its item."""
    (row,) = (
        await memory.add(
            [{"role": "user", "content": "Test message"}], user_id="test_user", expiration_date="2999-01-01"
        )
    )["results"]
    got = await memory.get(row["id"])
    assert got is not None
    assert got["expiration_date"] == "2999-01-01"


async def test_add_rejects_a_malformed_expiration_date(memory: AsyncMemory) -> None:
    """mem0's _normalize_expiration_date: a str that is no YYYY-MM-DD date is a ValueError."""
    with pytest.raises(ValueError, match="expiration_date must be a valid date in YYYY-MM-DD format"):
        await memory.add("x", user_id="u", expiration_date="next tuesday")
    with pytest.raises(ValueError, match="expiration_date must be a date string"):
        await memory.add("x", user_id="u", expiration_date=20990101)


async def test_add_infer_false_of_a_stored_text_answers_the_existing_memory(memory: AsyncMemory) -> None:
    """A text already stored in the scope is not stored twice: its row is the existing
    memory with mem0's event NONE (mem0 itself stores a second copy; memplane answers
    with the one it has)."""
    (first,) = (await memory.add("I drink oolong tea", user_id="u", infer=False))["results"]
    (again,) = (await memory.add("I drink oolong tea", user_id="u", infer=False))["results"]
    assert again == {
        "id": first["id"],
        "memory": "I drink oolong tea",
        "event": "NONE",
        "actor_id": None,
        "role": "user",
    }
    assert len((await memory.get_all(filters={"user_id": "u"}))["results"]) == 1


async def test_add_takes_any_number_of_messages(memory: AsyncMemory) -> None:
    """mem0 takes any number of messages in one add(); memplane's server takes 256 per
    write, so the facade sends them in batches, in order, each stored atomically."""
    messages = [{"role": "user", "content": f"fact number {i}"} for i in range(300)]
    result = await memory.add(messages, user_id="many", infer=False)
    assert [row["memory"] for row in result["results"]] == [m["content"] for m in messages]
    assert {row["event"] for row in result["results"]} == {"ADD"}
    assert len((await memory.get_all(filters={"user_id": "many"}, top_k=1000))["results"]) == 300


async def test_add_when_a_later_batch_fails_keeps_the_earlier_ones_and_a_retry_completes(
    memory: AsyncMemory,
) -> None:
    """The documented rule: the batches before a refused one stay stored, the refused one
    and those after it store nothing; add() again with the same messages answers the
    stored ones NONE and adds the rest."""
    messages = [{"role": "user", "content": f"note {i}"} for i in range(300)]
    messages[280]["content"] = "x" * 40_000  # over limits.max_content_bytes: batch 2 is refused
    with pytest.raises(ValidationError):
        await memory.add(messages, user_id="later", infer=False)
    assert len((await memory.get_all(filters={"user_id": "later"}, top_k=1000))["results"]) == 256
    messages[280]["content"] = "note 280"
    events = [row["event"] for row in (await memory.add(messages, user_id="later", infer=False))["results"]]
    assert events == ["NONE"] * 256 + ["ADD"] * 44


async def test_add_refuses_platform_only_timestamp(memory: AsyncMemory) -> None:
    """mem0's add(timestamp=...) is a ValueError: a Platform-only parameter."""
    with pytest.raises(ValueError, match="timestamp parameter is not supported"):
        await memory.add("x", user_id="u", timestamp=1_700_000_000)


async def test_add_metadata_cannot_set_identity_fields(memory: AsyncMemory) -> None:
    """memory/test_main.py::test_add_metadata_cannot_set_identity_fields and
    test_add_entity_params_still_set_scope."""
    (row,) = (await memory.add("scoped", user_id="alice", metadata={"user_id": "mallory", "k": 1}, infer=False))[
        "results"
    ]
    got = await memory.get(row["id"])
    assert got is not None
    assert (got["user_id"], got["metadata"]) == ("alice", {"k": 1})


# --- get / get_all -------------------------------------------------------------------


async def test_get(memory: AsyncMemory) -> None:
    """test_main.py::test_get: id, memory, user_id, hash, timestamps, the rest under metadata."""
    (row,) = (await memory.add("Test memory", user_id="test_user", metadata={"extra_field": "extra_value"}))["results"]
    got = await memory.get(row["id"])
    assert got is not None
    assert (got["id"], got["memory"], got["user_id"]) == (row["id"], "Test memory", "test_user")
    assert got["hash"] == hashlib.md5(b"Test memory").hexdigest()  # noqa: S324 - mem0's hash
    assert got["created_at"]
    assert got["updated_at"]
    assert got["metadata"] == {"extra_field": "extra_value"}


async def test_get_of_an_unknown_id_is_none(memory: AsyncMemory) -> None:
    """mem0's get returns None when the store has no such memory."""
    assert await memory.get(MISSING_ID) is None


async def test_get_all(memory: AsyncMemory) -> None:
    """test_main.py::test_get_all."""
    await memory.add("Memory 1", user_id="test_user")
    result = await memory.get_all(filters={"user_id": "test_user"})
    (item,) = result["results"]
    assert (item["memory"], item["user_id"]) == ("Memory 1", "test_user")


async def test_get_all_hides_expired_memories_by_default(memory: AsyncMemory, workspace: TestWorkspace) -> None:
    """test_main.py::test_get_all_hides_expired_memories_by_default."""
    (gone,) = (await memory.add("Expired memory", user_id="test_user"))["results"]
    await memory.add("Active memory", user_id="test_user", expiration_date="2999-01-01")
    await _expire_now(workspace, gone["id"])
    result = await memory.get_all(filters={"user_id": "test_user"})
    assert _memories(result) == ["Active memory"]
    assert result["results"][0]["expiration_date"] == "2999-01-01"


async def test_get_all_can_show_expired_memories(memory: AsyncMemory, workspace: TestWorkspace) -> None:
    """test_main.py::test_get_all_can_show_expired_memories (memplane lists newest first)."""
    await memory.add("Active memory", user_id="test_user")
    (gone,) = (await memory.add("Expired memory", user_id="test_user"))["results"]
    await _expire_now(workspace, gone["id"])
    result = await memory.get_all(filters={"user_id": "test_user"}, show_expired=True)
    assert _memories(result) == ["Expired memory", "Active memory"]
    assert result["results"][0]["expiration_date"] == (datetime.now(UTC) - timedelta(seconds=2)).date().isoformat()


async def test_a_past_expiration_date_is_hidden_at_once(memory: AsyncMemory) -> None:
    """mem0: a memory whose expiration_date is before today is expired."""
    await memory.add("from long ago", user_id="old", expiration_date="2000-01-01")
    await memory.add("still here", user_id="old", expiration_date=datetime.now(UTC).date() + timedelta(days=2))
    assert _memories(await memory.get_all(filters={"user_id": "old"})) == ["still here"]
    assert _memories(await memory.search("here", filters={"user_id": "old"})) == ["still here"]


# --- search --------------------------------------------------------------------------


async def test_search(memory: AsyncMemory) -> None:
    """test_main.py::test_search: results with id, memory, user_id and a score."""
    await memory.add("Memory about hiking in the Alps", user_id="test_user")
    await memory.add("Memory about baking bread", user_id="test_user")
    result = await memory.search("hiking in the Alps", filters={"user_id": "test_user"})
    first = result["results"][0]
    assert (first["memory"], first["user_id"]) == ("Memory about hiking in the Alps", "test_user")
    assert first["id"]
    assert 0 < first["score"] <= 1


async def test_search_hides_expired_memories_by_default(memory: AsyncMemory, workspace: TestWorkspace) -> None:
    """test_main.py::test_search_hides_expired_memories_by_default."""
    (gone,) = (await memory.add("Expired memory", user_id="test_user"))["results"]
    await memory.add("Active memory", user_id="test_user", expiration_date="2999-01-01")
    await _expire_now(workspace, gone["id"])
    result = await memory.search("memory", filters={"user_id": "test_user"})
    assert _memories(result) == ["Active memory"]
    assert result["results"][0]["expiration_date"] == "2999-01-01"


async def test_search_can_show_expired_memories(memory: AsyncMemory, workspace: TestWorkspace) -> None:
    """test_main.py::test_search_can_show_expired_memories."""
    (gone,) = (await memory.add("Expired memory", user_id="test_user"))["results"]
    await memory.add("Active memory", user_id="test_user")
    await _expire_now(workspace, gone["id"])
    result = await memory.search("memory", filters={"user_id": "test_user"}, show_expired=True)
    assert sorted(_memories(result)) == ["Active memory", "Expired memory"]


async def test_search_threshold_cuts_on_the_relevance_and_none_by_default(
    memory: AsyncMemory, workspace: TestWorkspace
) -> None:
    """mem0's search(threshold=0.1): hits under it are left out, on memplane's absolute
    relevance (SearchHit.relevance). A deliberate difference: no threshold by default (mem0's
    is 0.1), so the default keeps every hit, as threshold=None does."""
    for text in ("I love gardening tomatoes", "My sister lives in Lisbon", "I play the cello on Sundays"):
        await memory.add(text, user_id="d", infer=False)
    query = "What is the airspeed of an unladen swallow?"
    every = (await memory.search(query, filters={"user_id": "d"}, threshold=None))["results"]
    assert len(every) == 3
    reply = await workspace.client.search(query, top_k=20, filter=filter_pb2.MemoryFilter(user_id="d"))
    kept = [hit.memory.content for hit in reply.hits if hit.relevance >= 0.1]
    assert len(kept) < len(every)  # the off-topic question's hits are under mem0's 0.1
    assert len((await memory.search(query, filters={"user_id": "d"}))["results"]) == len(every)
    assert _memories(await memory.search(query, filters={"user_id": "d"}, threshold=0.1)) == kept


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
async def test_search_rejects_empty_query(memory: AsyncMemory, query: str) -> None:
    """test_main.py::TestSearchParamValidation::test_search_rejects_empty_query."""
    with pytest.raises(ValueError, match=r"Invalid query.*empty or whitespace-only"):
        await memory.search(query, filters={"user_id": "test"})


async def test_search_trims_query(memory: AsyncMemory) -> None:
    """test_main.py::test_search_trims_query_before_embedding: "  test  " finds as "test"."""
    await memory.add("test", user_id="test")
    assert _memories(await memory.search("  test  ", filters={"user_id": "test"})) == ["test"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.5}, "Invalid threshold.*Must be between 0 and 1"),
        ({"threshold": -0.5}, "Invalid threshold.*Must be between 0 and 1"),
        ({"threshold": "0.5"}, "threshold must be a valid number"),
        ({"top_k": -5}, "Invalid top_k.*Must be a non-negative"),
        ({"top_k": "5"}, "top_k must be a valid integer"),
        ({"reference_date": "2026-01-01"}, "reference_date parameter is not supported"),
        ({"explain": True}, "explain"),
    ],
)
async def test_search_rejects_bad_parameters(memory: AsyncMemory, kwargs: dict[str, Any], message: str) -> None:
    """test_main.py::test_search_rejects_threshold_above_1 / _negative_threshold /
    _negative_top_k; mem0's _validate_search_params for a non-number; reference_date is
    Platform-only in mem0; explain (mem0's score_details) is not served by the facade."""
    with pytest.raises(ValueError, match=message):
        await memory.search("test query", filters={"user_id": "test"}, **kwargs)


@pytest.mark.parametrize("kwargs", [{"threshold": 0}, {"threshold": 1.0}, {"top_k": 0}])
async def test_search_accepts_edge_values(memory: AsyncMemory, kwargs: dict[str, Any]) -> None:
    """test_main.py::test_search_accepts_threshold_zero / _threshold_one / _top_k_zero."""
    assert "results" in await memory.search("test", filters={"user_id": "test"}, **kwargs)


# --- get_all parameters ---------------------------------------------------------------


@pytest.mark.parametrize("top_k", [-1, "3", True])
async def test_get_all_rejects_a_bad_top_k(memory: AsyncMemory, top_k: Any) -> None:
    """test_main.py::test_get_all_rejects_negative_top_k (and mem0's integer check)."""
    with pytest.raises(ValueError, match="top_k"):
        await memory.get_all(filters={"user_id": "test"}, top_k=top_k)


# --- entity ids ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.search("test query", filters={"user_id": "   "}), "Invalid user_id.*cannot be empty"),
        (
            lambda m: m.search("test query", filters={"user_id": "user 123"}),
            "Invalid user_id.*cannot contain whitespace",
        ),
        (
            lambda m: m.search("test query", filters={"user_id": "user\t123"}),
            "Invalid user_id.*cannot contain whitespace",
        ),
        (lambda m: m.get_all(filters={"user_id": "   "}), "Invalid user_id.*cannot be empty"),
        (lambda m: m.get_all(filters={"user_id": "user 123"}), "Invalid user_id.*cannot contain whitespace"),
        (lambda m: m.add("test message", user_id="   "), "Invalid user_id.*cannot be empty"),
        (lambda m: m.add("test message", user_id="user 123"), "Invalid user_id.*cannot contain whitespace"),
        (lambda m: m.delete_all(user_id="   "), "Invalid user_id.*cannot be empty"),
        (lambda m: m.delete_all(user_id="user 123"), "Invalid user_id.*cannot contain whitespace"),
    ],
)
async def test_entity_ids_are_validated(memory: AsyncMemory, call: Any, message: str) -> None:
    """test_main.py::TestEntityIdValidation: the nine rejections."""
    with pytest.raises(ValueError, match=message):
        await call(memory)


async def test_delete_all_trims_user_id(memory: AsyncMemory) -> None:
    """test_main.py::test_delete_all_trims_user_id_before_list."""
    await memory.add("trim me", user_id="alice")
    await memory.delete_all(user_id="  alice  ")
    assert (await memory.get_all(filters={"user_id": "alice"}))["results"] == []


@pytest.mark.parametrize("user_id", [42, 0])
async def test_integer_user_ids_scope_by_their_str_form(memory: AsyncMemory, user_id: int) -> None:
    """test_main.py::test_validate_coerces_non_string_entity_id,
    test_get_all_coerces_integer_user_id, test_delete_all_coerces_integer_user_id_before_list:
    0 is the id "0", not a missing one."""
    await memory.add("numbered", user_id=user_id)
    assert _memories(await memory.get_all(filters={"user_id": user_id})) == ["numbered"]
    assert _memories(await memory.get_all(filters={"user_id": str(user_id)})) == ["numbered"]
    await memory.delete_all(user_id=user_id)
    assert (await memory.get_all(filters={"user_id": user_id}))["results"] == []


# --- update --------------------------------------------------------------------------


async def test_update(memory: AsyncMemory) -> None:
    """test_main.py::test_update."""
    (row,) = (await memory.add("Old memory", user_id="u"))["results"]
    assert (await memory.update(row["id"], "Updated memory"))["message"] == "Memory updated successfully!"
    got = await memory.get(row["id"])
    assert got is not None
    assert got["memory"] == "Updated memory"


async def test_update_with_metadata(memory: AsyncMemory) -> None:
    """test_main.py::test_update_with_metadata."""
    (row,) = (await memory.add("Old memory", user_id="u"))["results"]
    await memory.update(row["id"], "Updated memory", metadata={"category": "sports", "priority": "high"})
    got = await memory.get(row["id"])
    assert got is not None
    assert got["metadata"] == {"category": "sports", "priority": "high"}


async def test_update_with_empty_metadata_keeps_the_metadata(memory: AsyncMemory) -> None:
    """test_main.py::test_update_with_empty_metadata (mem0 merges {} into the payload)."""
    (row,) = (await memory.add("Old memory", user_id="u", metadata={"k": "v"}))["results"]
    await memory.update(row["id"], "Updated memory", metadata={})
    got = await memory.get(row["id"])
    assert got is not None
    assert (got["memory"], got["metadata"]) == ("Updated memory", {"k": "v"})


async def test_update_merges_metadata(memory: AsyncMemory) -> None:
    """test_memory.py::TestPreserveCustomMetadata: test_update_preserves_custom_metadata and
    test_update_with_new_metadata_overrides_existing (mem0 merges the new keys into the
    stored ones; it never drops one the update does not name)."""
    (row,) = (await memory.add("Likes tea", user_id="u", metadata={"category": "drinks", "source": "chat"}))["results"]
    await memory.update(row["id"], metadata={"category": "beverages", "priority": 1})
    got = await memory.get(row["id"])
    assert got is not None
    assert got["metadata"] == {"category": "beverages", "source": "chat", "priority": 1}
    await memory.update(row["id"], text="Likes green tea")
    got = await memory.get(row["id"])
    assert got is not None
    assert got["metadata"] == {"category": "beverages", "source": "chat", "priority": 1}


async def test_update_preserves_actor_id_and_identity(memory: AsyncMemory) -> None:
    """test_memory.py::test_update_preserves_actor_id_from_original and
    memory/test_main.py::test_update_memory_metadata_cannot_change_identity_fields."""
    (row,) = (await memory.add([{"role": "user", "content": "I am Ana", "name": "Ana"}], user_id="ana", infer=False))[
        "results"
    ]
    await memory.update(row["id"], metadata={"user_id": "mallory", "actor_id": "Eve", "mood": "ok"})
    got = await memory.get(row["id"])
    assert got is not None
    assert (got["user_id"], got["actor_id"], got["role"], got["metadata"]) == ("ana", "Ana", "user", {"mood": "ok"})


async def test_update_data_is_deprecated_alias_for_text(memory: AsyncMemory, caplog: pytest.LogCaptureFixture) -> None:
    """test_main.py::test_update_data_is_deprecated_alias_for_text: data= works with a
    warning that says "deprecated"; text wins when both are given."""
    (row,) = (await memory.add("original", user_id="u"))["results"]
    with caplog.at_level(logging.WARNING):
        await memory.update(row["id"], data="via data")
    assert any("deprecated" in record.getMessage() for record in caplog.records)
    got = await memory.get(row["id"])
    assert got is not None
    assert got["memory"] == "via data"
    await memory.update(row["id"], text="preferred", data="ignored")
    got = await memory.get(row["id"])
    assert got is not None
    assert got["memory"] == "preferred"


@pytest.mark.parametrize(("expiration_date", "expected"), [("2999-01-01", "2999-01-01"), (None, None)])
async def test_update_can_change_expiration_date_without_changing_text(
    memory: AsyncMemory, expiration_date: str | None, expected: str | None
) -> None:
    """test_main.py::test_update_can_change_expiration_date_without_changing_text: a date
    sets it, None clears it; the text stays."""
    (row,) = (await memory.add("Existing memory", user_id="test_user", expiration_date="2998-12-31"))["results"]
    result = await memory.update(row["id"], expiration_date=expiration_date)
    assert result["message"] == "Memory updated successfully!"
    got = await memory.get(row["id"])
    assert got is not None
    assert got["memory"] == "Existing memory"
    assert got.get("expiration_date") == expected


async def test_update_needs_something_to_change(memory: AsyncMemory) -> None:
    """mem0's update() with neither text, metadata nor expiration_date."""
    with pytest.raises(ValueError, match="At least one of text, metadata, or expiration_date must be provided"):
        await memory.update(MISSING_ID)


async def test_update_of_an_unknown_memory_raises(memory: AsyncMemory) -> None:
    """test_memory.py::test_update_nonexistent_memory_raises_error."""
    with pytest.raises(ValueError, match="not found"):
        await memory.update(MISSING_ID, text="x")


# --- delete / history ----------------------------------------------------------------


async def test_delete(memory: AsyncMemory) -> None:
    """test_main.py::test_delete."""
    (row,) = (await memory.add("to delete", user_id="u"))["results"]
    assert (await memory.delete(row["id"]))["message"] == "Memory deleted successfully!"
    assert await memory.get(row["id"]) is None


async def test_delete_of_an_unknown_memory_raises(memory: AsyncMemory) -> None:
    """test_memory.py::test_delete_nonexistent_memory_raises_error."""
    with pytest.raises(ValueError, match="not found"):
        await memory.delete(MISSING_ID)


async def test_delete_all(memory: AsyncMemory) -> None:
    """test_main.py::test_delete_all: only the scope's memories go."""
    await memory.add("one", user_id="test_user")
    await memory.add("two", user_id="test_user")
    await memory.add("other", user_id="someone_else")
    assert (await memory.delete_all(user_id="test_user"))["message"] == "Memories deleted successfully!"
    assert (await memory.get_all(filters={"user_id": "test_user"}))["results"] == []
    assert _memories(await memory.get_all(filters={"user_id": "someone_else"})) == ["other"]


async def test_history(memory: AsyncMemory) -> None:
    """test_memory.py::test_history: ADD then UPDATE rows."""
    (row,) = (await memory.add("v1", user_id="u"))["results"]
    await memory.update(row["id"], text="v2")
    history = await memory.history(row["id"])
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
        ("ADD", None, "v1"),
        ("UPDATE", "v1", "v2"),
    ]


# --- the Platform client -------------------------------------------------------------


async def test_platform_get_all_has_mem0s_pagination_keys(platform: AsyncMemoryClient) -> None:
    """mem0's MemoryClient.get_all returns {"count", "next", "previous", "results"}."""
    await platform.add("paged", user_id="p")
    result = await platform.get_all(filters={"user_id": "p"})
    assert set(result) == {"count", "next", "previous", "results"}
    assert (result["count"], result["next"], result["previous"], _memories(result)) == (1, None, None, ["paged"])


async def test_platform_accepts_and_ignores_platform_arguments(
    platform: AsyncMemoryClient, caplog: pytest.LogCaptureFixture
) -> None:
    """test_client.py's app_id / page / delete_linked / options: accepted, unused, and a
    warning names them."""
    with caplog.at_level(logging.WARNING):
        (row,) = (await platform.add("platform args", user_id="p", app_id="app", options=None))["results"]
        await platform.search("platform", filters={"user_id": "p"}, options={"rerank": True})
        result = await platform.get_all(filters={"user_id": "p"}, page=2, page_size=50, app_id="app")
        await platform.delete(row["id"], delete_linked=True)
    assert _memories(result) == ["platform args"]
    warned = " ".join(record.getMessage() for record in caplog.records)
    for name in ("app_id", "options", "page", "delete_linked"):
        assert name in warned


async def test_platform_search_passes_show_expired(platform: AsyncMemoryClient, workspace: TestWorkspace) -> None:
    """test_client.py::test_search_passes_show_expired and test_get_all_passes_show_expired."""
    (row,) = (await platform.add("expired on the platform", user_id="p"))["results"]
    await _expire_now(workspace, row["id"])
    assert _memories(await platform.search("platform", filters={"user_id": "p"})) == []
    assert _memories(await platform.search("platform", filters={"user_id": "p"}, show_expired=True)) == [
        "expired on the platform"
    ]
    assert _memories(await platform.get_all(filters={"user_id": "p"}, show_expired=True)) == ["expired on the platform"]


async def test_the_blocking_platform_client_takes_the_same_arguments(server: str, workspace: TestWorkspace) -> None:
    """mem0's blocking `MemoryClient`: get_all's page shape, delete(delete_linked=),
    expiration_date and show_expired pass through to the async client."""

    def script() -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        with MemoryClient(api_key=workspace.key, host=server) as client:
            (row,) = client.add("blocking", user_id="b", expiration_date="2999-01-01")["results"]
            listed = client.get_all(filters={"user_id": "b"}, show_expired=True)
            deleted = client.delete(row["id"], delete_linked=True)
            return listed, deleted, _memories(client.get_all(filters={"user_id": "b"}))

    listed, deleted, after = await asyncio.to_thread(script)
    assert (listed["count"], listed["results"][0]["expiration_date"]) == (1, "2999-01-01")
    assert deleted == {"message": "Memory deleted successfully!"}
    assert after == []
