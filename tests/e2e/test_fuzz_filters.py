"""The filter language fuzzed through the real search path: hypothesis builds arbitrary
`MemoryFilter`s (scope ids, types, times, metadata expressions of any shape, operator and
JSON value — NUL, `%`, quotes, non-finite numbers, unknown enum values included), the
SDK sends each over gRPC to SearchMemories (every mode) and ListMemories against the
real database. Property: each call answers, or is INVALID_ARGUMENT naming a `filter`
field — never another status. Bounded and reproducible: a fixed number of examples,
derandomized, no example database. Crashes found are kept as explicit `@example`s."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.v1 import filter_pb2, retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.strategies import json_values, texts, timestamps, to_value
from tests.support import mem, unit_vectors

EXAMPLES = 120
MODES = (
    retrieval_pb2.SEARCH_MODE_HYBRID,
    retrieval_pb2.SEARCH_MODE_VECTOR,
    retrieval_pb2.SEARCH_MODE_LEXICAL,
)
SEEDED = (
    {"topic": "a%b", "n": 3, "tags": ["x", "y"], "nested": {"k": 1.5}, "flag": True, "s": "10"},
    {"topic": "tea", "n": -2.5, "tags": "x", "nested": {"k": "1.5"}, "s": 10},
    {},
)

keys = st.one_of(st.sampled_from(("topic", "n", "tags", "nested.k", "s", "flag", "a.b", ".", "a..b", "")), texts)
operators = st.one_of(st.sampled_from(list(filter_pb2.ConditionOperator.values())), st.integers(0, 99))


@st.composite
def conditions(draw: st.DrawFn) -> filter_pb2.MetadataFilter:
    condition = filter_pb2.MetadataCondition(key=draw(keys), operator=draw(operators))  # type: ignore[arg-type]
    if draw(st.booleans()):
        condition.value.CopyFrom(to_value(draw(json_values)))
    return filter_pb2.MetadataFilter(condition=condition)


def _group(children: st.SearchStrategy[filter_pb2.MetadataFilter]) -> st.SearchStrategy[filter_pb2.MetadataFilter]:
    lists = st.lists(children, max_size=4).map(lambda fs: filter_pb2.MetadataFilterList(filters=fs))
    return st.one_of(
        lists.map(lambda fl: filter_pb2.MetadataFilter(all=fl)),
        lists.map(lambda fl: filter_pb2.MetadataFilter(any=fl)),
        children.map(lambda f: filter_pb2.MetadataFilter(**{"not": f})),
    )


expressions = st.recursive(st.one_of(conditions(), st.just(filter_pb2.MetadataFilter())), _group, max_leaves=10)


@st.composite
def memory_filters(draw: st.DrawFn) -> filter_pb2.MemoryFilter:
    flt = filter_pb2.MemoryFilter(
        user_id=draw(texts),
        agent_id=draw(st.one_of(st.just(""), texts)),
        session_id=draw(st.one_of(st.just(""), texts)),
        types=draw(st.lists(st.integers(0, 12), max_size=3)),
        include_superseded=draw(st.booleans()),
        include_expired=draw(st.booleans()),
    )
    if draw(st.booleans()):
        flt.metadata.CopyFrom(draw(expressions))
    if draw(st.booleans()):
        flt.create_time_start.CopyFrom(draw(timestamps))
    if draw(st.booleans()):
        flt.create_time_end.CopyFrom(draw(timestamps))
    return flt


async def _probe(client: AsyncMemplaneClient, flt: filter_pb2.MemoryFilter, mode: int, seen: Counter[str]) -> None:
    """Search and list with *flt*: each answers or is INVALID_ARGUMENT naming a filter
    field. Counts the outcomes in *seen* ("hits", "answered", "invalid")."""
    for call in (
        lambda: client.search("spare key", filter=flt, mode=mode, top_k=5),
        lambda: client.list_memories(filter=flt, page_size=5),
    ):
        refused: list[str] | None = None
        try:
            reply = await call()
        except InvalidArgumentError as error:
            refused = [v.field for v in error.violations]
        if refused is None:
            seen["hits" if len(getattr(reply, "hits", None) or getattr(reply, "memories", ())) else "answered"] += 1
        else:
            assert refused, "INVALID_ARGUMENT without a field violation"
            assert all(f.startswith("filter") for f in refused), refused
            seen["invalid"] += 1


@pytest.mark.timeout(120)
async def test_any_filter_answers_or_is_invalid_argument(workspace: TestWorkspace) -> None:
    await workspace.client.add_memories(
        [
            mem("the spare key is under the pot", user_id="u", metadata=m, embedding=v)
            for m, v in zip(SEEDED, unit_vectors(len(SEEDED), seed=11), strict=True)
        ]
    )
    loop = asyncio.get_running_loop()
    seen: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(flt=memory_filters(), mode=st.sampled_from(MODES))
    @example(flt=filter_pb2.MemoryFilter(user_id="a%b"), mode=retrieval_pb2.SEARCH_MODE_VECTOR)
    def check(flt: filter_pb2.MemoryFilter, mode: int) -> None:
        asyncio.run_coroutine_threadsafe(_probe(workspace.client, flt, mode, seen), loop).result(timeout=60)

    await asyncio.to_thread(check)  # hypothesis drives sync code; the calls run on this loop
    assert min(seen["hits"], seen["answered"], seen["invalid"]) > 0, seen  # all three kinds were explored
