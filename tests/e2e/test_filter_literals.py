"""Filter values that look like SQL or driver syntax — `%`, `%s`, `%%`, `_`, a quote, a
backslash — match exactly the memories holding that very value, in every scope field and
in metadata, through every search mode and ListMemories: values are bound parameters,
never text the driver or LIKE reads (an inlined `'alice%'` once returned INTERNAL from
vector search, and `'a%%b'` matched a stored `'a%b'`)."""

from __future__ import annotations

import pytest

from memplane.v1 import filter_pb2, retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.support import cond, list_all, mem, unit_vectors

VALUES = ["alice%", "a%b", "a%%b", "%s", "%(ws)s", "a_b", "o'brien", "back\\slash"]
MODES = [retrieval_pb2.SEARCH_MODE_HYBRID, retrieval_pb2.SEARCH_MODE_LEXICAL, retrieval_pb2.SEARCH_MODE_VECTOR]


@pytest.mark.parametrize("field", ["user_id", "agent_id", "session_id", "metadata"])
async def test_a_filter_value_matches_only_itself(workspace: TestWorkspace, field: str) -> None:
    vectors = unit_vectors(len(VALUES), seed=11)
    items = []
    for i, value in enumerate(VALUES):
        scope = {} if field == "metadata" else {field: value}
        metadata = {"tag": value} if field == "metadata" else None
        items.append(mem(f"tide table entry {i}", embedding=vectors[i], metadata=metadata, **scope))
    stored = await workspace.client.add_memories(items)
    by_value = {value: m.id for value, m in zip(VALUES, stored, strict=True)}
    for value in VALUES:
        if field == "metadata":
            flt = filter_pb2.MemoryFilter(metadata=cond("tag", filter_pb2.CONDITION_OPERATOR_EQ, value))
        else:
            flt = filter_pb2.MemoryFilter(**{field: value})
        assert [m.id for m in await list_all(workspace.client, flt)] == [by_value[value]], value
        for mode in MODES:
            reply = await workspace.client.search("tide table entry", filter=flt, mode=mode, top_k=20)
            assert [h.memory.id for h in reply.hits] == [by_value[value]], (value, mode)
