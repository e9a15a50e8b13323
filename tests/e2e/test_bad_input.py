"""Every bad input is INVALID_ARGUMENT with a BadRequest field violation naming the field
(read back through the SDK's typed `InvalidArgumentError.violations`), and leaves what was
stored before exactly as it was: same memory, same count, same history."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import cond, fields, mem, struct, ts, unit_vectors

C = AsyncMemplaneClient
Call = Callable[[C, memory_pb2.Memory], Awaitable[Any]]
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
IN = filter_pb2.CONDITION_OPERATOR_IN
EQ = filter_pb2.CONDITION_OPERATOR_EQ


def deep(levels: int) -> dict[str, Any]:
    out: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        out = {"d": out}
    return out


def msg(content: str = "hi", role: int = memory_pb2.MESSAGE_ROLE_USER, id: str = "") -> Any:
    return writeback_pb2.ConversationMessage(content=content, role=role, id=id)  # type: ignore[arg-type]


def token(data: Any) -> str:
    """A page token in ListMemories' encoding (url-safe base64 of JSON) with other content."""
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def add(*items: memory_pb2.MemoryInput, request_id: str = "") -> Call:
    return lambda c, _: c.add_memories(list(items), request_id=request_id)


def search(queries: Any = "query", **kw: Any) -> Call:
    return lambda c, _: c.search(queries, **kw)


def raw_search(**kw: Any) -> Call:
    return lambda c, _: c._call(c.retrieval.SearchMemories, retrieval_pb2.SearchMemoriesRequest(**kw))


def listing(**kw: Any) -> Call:
    return lambda c, _: c.list_memories(**kw)


def with_filter(metadata: filter_pb2.MetadataFilter) -> filter_pb2.MemoryFilter:
    return filter_pb2.MemoryFilter(metadata=metadata)


SCOPE = memory_pb2.Scope(user_id="u", session_id="s")

CASES: list[tuple[str, Call, list[str]]] = [
    # AddMemories
    ("content empty", add(mem("")), ["memories[0].content"]),
    ("content blank", add(mem(" \n\t ")), ["memories[0].content"]),
    ("content over 32 KiB", add(mem("x" * (32 * 1024 + 1))), ["memories[0].content"]),
    ("content over 32 KiB in UTF-8 bytes", add(mem("语" * 10923)), ["memories[0].content"]),
    ("NUL in content", add(mem("a\x00b")), ["memories[0].content"]),
    ("batch over 256", add(*[mem(f"m{i}") for i in range(257)]), ["memories"]),
    ("empty batch", add(), ["memories"]),
    ("second item bad, first not stored", add(mem("fine"), mem("")), ["memories[1].content"]),
    ("metadata too big", add(mem("ok", metadata={"blob": "x" * (16 * 1024)})), ["memories[0].metadata"]),
    ("metadata too deep", add(mem("ok", metadata=deep(6))), ["memories[0].metadata"]),
    ("metadata identity key", add(mem("ok", metadata={"session_id": "s2"})), ["memories[0].metadata"]),
    ("metadata workspace key", add(mem("ok", metadata={"workspace": "other"})), ["memories[0].metadata"]),
    (
        "valid_to before valid_from",
        add(mem("ok", valid_from_time=ts(T0), valid_to_time=ts(T0 - timedelta(seconds=1)))),
        ["memories[0].valid_to_time"],
    ),
    ("wrong embedding length", add(mem("ok", embedding=[0.1, 0.2, 0.3])), ["memories[0].embedding"]),
    ("zero embedding", add(mem("ok", embedding=[0.0] * 384)), ["memories[0].embedding"]),
    # pgvector computes cosine in float32: a norm whose square underflows to 0 or overflows to
    # infinity there made every search's vector score NaN (WEIGHTED fused scores all NaN).
    ("embedding too short to have a cosine", add(mem("ok", embedding=[1e-30] * 384)), ["memories[0].embedding"]),
    ("embedding too long to have a cosine", add(mem("ok", embedding=[1e30] * 384)), ["memories[0].embedding"]),
    ("name too long", add(mem("ok", name="n" * 257)), ["memories[0].name"]),
    ("user_id too long", add(mem("ok", user_id="u" * 129)), ["memories[0].scope.user_id"]),
    ("unknown type", add(mem("ok", type=99)), ["memories[0].type"]),
    ("request_id too long", add(mem("ok"), request_id="r" * 129), ["request_id"]),
    (
        "several bad fields at once",
        add(mem("", name="n" * 300), mem("ok", metadata={"user_id": "x"})),
        ["memories[0].content", "memories[0].name", "memories[1].metadata"],
    ),
    ("NaN in metadata", add(mem("ok", metadata={"x": [1, float("nan")]})), ["memories[0].metadata"]),
    ("Infinity in metadata", add(mem("ok", metadata={"x": {"y": float("inf")}})), ["memories[0].metadata"]),
    ("time past year 9999", add(mem("ok", valid_from_time=Timestamp(seconds=2**40))), ["memories[0].valid_from_time"]),
    (
        "time with nanos over 1 s",
        add(mem("ok", expire_time=Timestamp(seconds=5, nanos=2_000_000_000))),
        ["memories[0].expire_time"],
    ),
    # SearchMemories
    ("top_k over 100", search(top_k=101), ["top_k"]),
    ("top_k negative", search(top_k=-1), ["top_k"]),
    ("query over 4096 bytes", search("q" * 4097), ["queries[0]"]),
    ("empty queries list", search([]), ["queries"]),
    ("too many queries", search([f"q{i}" for i in range(9)]), ["queries"]),
    ("empty query", search(["fine", ""]), ["queries[1]"]),
    ("min_score over 1", search(min_score=1.5), ["min_score"]),
    ("vector_weight over 1", search(vector_weight=2.0), ["ranking.vector_weight"]),
    ("unknown mode", raw_search(queries=["q"], mode=99), ["mode"]),
    ("unknown fusion", raw_search(queries=["q"], ranking=retrieval_pb2.RankingOptions(fusion=99)), ["ranking.fusion"]),
    ("rrf_k negative", raw_search(queries=["q"], ranking=retrieval_pb2.RankingOptions(rrf_k=-5)), ["ranking.rrf_k"]),
    ("neighbour_window over 10", search(neighbour_window=11), ["ranking.neighbour_window"]),
    ("neighbour_window negative", search(neighbour_window=-1), ["ranking.neighbour_window"]),
    ("neighbour_weight over 1", search(neighbour_weight=1.5), ["ranking.neighbour_weight"]),
    ("speaker_weight negative", search(speaker_weight=-0.1), ["ranking.speaker_weight"]),
    ("time_weight not a number", search(time_weight=float("nan")), ["ranking.time_weight"]),
    ("prf_terms over 50", search(prf_terms=51), ["ranking.prf_terms"]),
    ("phrase_weight over 1", search(phrase_weight=1.01), ["ranking.phrase_weight"]),
    ("when_weight under 0", search(when_weight=-0.1), ["ranking.when_weight"]),
    ("context_turns over 10", search(context_turns=11), ["context_turns"]),
    ("context_max_tokens negative", search(context_max_tokens=-1), ["context_max_tokens"]),
    ("IN with a non-list", search(filter=with_filter(cond("tag", IN, "a"))), ["filter.metadata.condition.value"]),
    (
        "operator unset",
        search(filter=with_filter(cond("tag", filter_pb2.CONDITION_OPERATOR_UNSPECIFIED, "a"))),
        ["filter.metadata.condition.operator"],
    ),
    ("empty expression", search(filter=with_filter(filter_pb2.MetadataFilter())), ["filter.metadata"]),
    (
        "bad nested operand",
        search(
            filter=with_filter(
                filter_pb2.MetadataFilter(
                    any=filter_pb2.MetadataFilterList(filters=[cond("a", EQ, 1), cond("b", IN, 2)])
                )
            )
        ),
        ["filter.metadata.any.filters[1].condition.value"],
    ),
    (
        "ordering against a list",
        search(filter=with_filter(cond("n", filter_pb2.CONDITION_OPERATOR_GT, [1]))),
        ["filter.metadata.condition.value"],
    ),
    ("empty key", search(filter=with_filter(cond("", EQ, 1))), ["filter.metadata.condition.key"]),
    ("unknown type in filter", search(filter=filter_pb2.MemoryFilter(types=[42])), ["filter.types[0]"]),
    ("filter user_id too long", search(filter=filter_pb2.MemoryFilter(user_id="u" * 129)), ["filter.user_id"]),
    (
        "NaN in a filter value",
        search(filter=with_filter(cond("n", filter_pb2.CONDITION_OPERATOR_GT, float("nan")))),
        ["filter.metadata.condition.value"],
    ),
    (
        "filter time out of range",
        search(filter=filter_pb2.MemoryFilter(create_time_end=Timestamp(seconds=-(2**40)))),
        ["filter.create_time_end"],
    ),
    # ListMemories
    ("bad page_token", listing(page_token="not-a-token"), ["page_token"]),
    ("forged page_token", listing(page_token=token({"t": "2025-01-01T00:00:00+00:00", "i": "x"})), ["page_token"]),
    ("page_token of another shape", listing(page_token=token([1, 2])), ["page_token"]),
    ("page_size over 1000", listing(page_size=1001), ["page_size"]),
    ("page_size negative", listing(page_size=-1), ["page_size"]),
    ("list with bad filter", listing(filter=with_filter(cond("tag", IN, 3))), ["filter.metadata.condition.value"]),
    # Ids
    ("get malformed id", lambda c, _: c.get_memory("not-a-uuid"), ["id"]),
    ("get empty id", lambda c, _: c.get_memory(""), ["id"]),
    (
        "update malformed id",
        lambda c, _: c.update_memory("123", memory_pb2.MemoryInput(content="x"), ["content"]),
        ["id"],
    ),
    ("delete malformed id", lambda c, _: c.delete_memory("123"), ["id"]),
    ("history malformed id", lambda c, _: c.list_memory_events("123"), ["memory_id"]),
    (
        "update negative expected_version",
        lambda c, m: c.update_memory(m.id, memory_pb2.MemoryInput(content="x"), ["content"], expected_version=-1),
        ["expected_version"],
    ),
    (
        "update with NaN in metadata",
        lambda c, m: c.update_memory(m.id, memory_pb2.MemoryInput(metadata=struct({"x": float("nan")})), ["metadata"]),
        ["memory.metadata"],
    ),
    (
        "update with time out of range",
        lambda c, m: c.update_memory(
            m.id, memory_pb2.MemoryInput(valid_to_time=Timestamp(seconds=2**40)), ["valid_to_time"]
        ),
        ["memory.valid_to_time"],
    ),
    ("delete negative expected_version", lambda c, m: c.delete_memory(m.id, expected_version=-1), ["expected_version"]),
    # WriteConversation and DeleteMemoriesByScope
    (
        "conversation without session",
        lambda c, _: c.write_conversation(memory_pb2.Scope(user_id="u"), [msg()]),
        ["scope.session_id"],
    ),
    ("conversation without messages", lambda c, _: c.write_conversation(SCOPE, []), ["messages"]),
    (
        "message role unset",
        lambda c, _: c.write_conversation(SCOPE, [msg(role=memory_pb2.MESSAGE_ROLE_UNSPECIFIED)]),
        ["messages[0].role"],
    ),
    ("message content empty", lambda c, _: c.write_conversation(SCOPE, [msg(""), msg()]), ["messages[0].content"]),
    ("duplicate message ids", lambda c, _: c.write_conversation(SCOPE, [msg(id="x"), msg(id="x")]), ["messages[1].id"]),
    (
        "message time out of range",
        lambda c, _: c.write_conversation(
            SCOPE,
            [
                writeback_pb2.ConversationMessage(
                    role=memory_pb2.MESSAGE_ROLE_USER, content="hi", create_time=Timestamp(seconds=2**40)
                )
            ],
        ),
        ["messages[0].create_time"],
    ),
    ("messages over 256", lambda c, _: c.write_conversation(SCOPE, [msg() for _ in range(257)]), ["messages"]),
    ("delete by empty scope", lambda c, _: c.delete_memories_by_scope(memory_pb2.Scope()), ["scope"]),
    # valid_from_time unset means now: a valid_to_time in the past broke a CHECK (INTERNAL; found by fuzzing)
    ("valid_to before the default valid_from", add(mem("x", valid_to_time=ts(T0))), ["memories[0].valid_to_time"]),
]


@pytest.mark.parametrize(("call", "expected"), [pytest.param(c, f, id=i) for i, c, f in CASES])
async def test_bad_input_is_refused_naming_the_field_and_nothing_changes(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient, call: Call, expected: list[str]
) -> None:
    client = workspace.client
    [stored] = await client.add_memories(
        [
            mem(
                "Baseline memory that must survive",
                user_id="u",
                metadata={"tag": "a"},
                embedding=unit_vectors(1, seed=99)[0],
            )
        ]
    )

    with pytest.raises(InvalidArgumentError) as caught:
        await call(client, stored)
    assert fields(caught.value) == expected
    assert all(v.description for v in caught.value.violations)

    assert await client.get_memory(stored.id) == stored
    listed = await client.list_memories()
    assert [m.id for m in listed.memories] == [stored.id]
    assert listed.total_size == 1
    assert [e.kind for e in await client.list_memory_events(stored.id)] == [memory_pb2.EVENT_KIND_ADD]
    usage = await admin_client.get_workspace_usage(workspace.name)
    assert (usage.memory_count, usage.transcript_message_count) == (1, 0)
