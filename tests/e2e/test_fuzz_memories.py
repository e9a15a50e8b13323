"""The server's message converters (`memplane.convert`) and write validation fuzzed
over gRPC: hypothesis builds AddMemories batches of arbitrary MemoryInputs (content, name,
scope ids, type, metadata JSON with non-finite numbers and identity keys, times out of
range, embeddings of any length and value, provenance). Property: the batch is stored
whole, or refused whole with INVALID_ARGUMENT naming a `memories[i]` field — never
another status, and a refused batch leaves the stored count as it was. Derandomized and
bounded; crashes found are kept as `@example`s."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.v1 import filter_pb2, memory_pb2
from tests.fix_server import TestWorkspace
from tests.strategies import json_values, texts, timestamps, to_value
from tests.support import DIMENSIONS, cond, unit_vectors

EXAMPLES = 80
_UNIT = [float(x) for x in unit_vectors(1, seed=21)[0]]
embeddings = st.one_of(
    st.just(_UNIT),  # valid: stored without the embedding model
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=4),
    st.just([0.0] * DIMENSIONS),
    st.just([*_UNIT[:-1], float("nan")]),
)


@st.composite
def memory_inputs(draw: st.DrawFn) -> memory_pb2.MemoryInput:
    item = memory_pb2.MemoryInput(
        content=draw(st.one_of(st.just("a fact worth keeping"), texts)),
        name=draw(texts),
        description=draw(texts),
        type=draw(st.integers(0, 9)),  # type: ignore[arg-type]
        scope=memory_pb2.Scope(user_id=draw(texts), agent_id=draw(texts), session_id=draw(texts)),
        provenance=memory_pb2.Provenance(session_id=draw(texts), message_ids=draw(st.lists(texts, max_size=3))),
        embedding=draw(embeddings),
    )
    metadata = draw(st.dictionaries(st.one_of(st.sampled_from(["user_id", "Tenant_ID", "tag"]), texts), json_values))
    for key, value in metadata.items():
        item.metadata.fields[key].CopyFrom(to_value(value))
    for field in ("valid_from_time", "valid_to_time", "expire_time"):
        if draw(st.booleans()):
            getattr(item, field).CopyFrom(draw(timestamps))
    return item


GRACE_SECONDS = 3600  # retention.grace_seconds: a memory expired longer ago may be erased at any moment


def _tagged(batch: list[memory_pb2.MemoryInput], tag: str) -> list[memory_pb2.MemoryInput]:
    """Copies of *batch* whose metadata also holds {"probe": tag}, to count them by."""
    out = []
    for item in batch:
        copy = memory_pb2.MemoryInput()
        copy.CopyFrom(item)
        copy.metadata.fields["probe"].string_value = tag
        out.append(copy)
    return out


async def _count(client: AsyncMemplaneClient, tag: str) -> int:
    every = filter_pb2.MemoryFilter(  # times are random: count the expired and superseded too
        include_expired=True, include_superseded=True, metadata=cond("probe", filter_pb2.CONDITION_OPERATOR_EQ, tag)
    )
    return int((await client.list_memories(filter=every, page_size=1)).total_size)


async def _probe(client: AsyncMemplaneClient, batch: list[memory_pb2.MemoryInput], seen: Counter[str]) -> None:
    """Add *batch*: all stored, or INVALID_ARGUMENT naming memories[i] fields and none stored."""
    tag = uuid.uuid4().hex
    batch = _tagged(batch, tag)
    refused: list[str] | None = None
    try:
        reply = await client.add_memories_reply(batch)
    except InvalidArgumentError as error:
        refused = [v.field for v in error.violations]
    count = await _count(client, tag)
    if refused is None:
        assert len(reply.memories) == len(batch)
        # A text already current in its scope (an earlier example's) is a duplicate, not stored.
        batch = [m for i, m in enumerate(batch) if i not in reply.duplicate_indexes]
        # The retention sweep may already have erased one stored long expired (documented).
        erasable = sum(
            1 for m in batch if m.HasField("expire_time") and m.expire_time.seconds < time.time() - GRACE_SECONDS
        )
        assert len(batch) - erasable <= count <= len(batch)
        seen["stored"] += 1
    else:
        assert refused, "INVALID_ARGUMENT without a field violation"
        assert all(f.startswith("memories") for f in refused), refused
        assert count == 0, "a refused batch stored something"
        seen["refused"] += 1


@pytest.mark.timeout(180)
async def test_any_memory_batch_is_stored_whole_or_refused_naming_the_field(workspace: TestWorkspace) -> None:
    loop = asyncio.get_running_loop()
    seen: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(batch=st.lists(memory_inputs(), min_size=1, max_size=3))
    @example(batch=[memory_pb2.MemoryInput(content="ok", embedding=_UNIT, metadata=None)])
    # Found by this test (a test bug): a memory stored already expired is hidden from a plain
    # count, and one expired over an hour ago is erased by the retention sweep soon after.
    @example(batch=[memory_pb2.MemoryInput(content="a fact", embedding=_UNIT, expire_time=Timestamp(seconds=0))])
    # Found by this test: valid_to_time before the default valid_from (now) was INTERNAL (a CHECK).
    @example(batch=[memory_pb2.MemoryInput(content="a fact", embedding=_UNIT, valid_to_time=Timestamp(seconds=0))])
    def check(batch: list[Any]) -> None:
        asyncio.run_coroutine_threadsafe(_probe(workspace.client, batch, seen), loop).result(timeout=60)

    await asyncio.to_thread(check)  # hypothesis drives sync code; the calls run on this loop
    assert min(seen["stored"], seen["refused"]) > 0, seen  # both paths were explored
