"""The metadata filter language over real rows: every operator, AND / OR / NOT, nested
keys, numbers vs strings, awkward keys and values (compiled to SQL by storage/filters.py,
run through RetrievalService.list and .search)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from memplane.domain.filters import All, AnyOf, Condition, MemoryFilter, MetadataExpr, Not, Operator
from memplane.domain.models import NewMemory, Workspace
from memplane.server.app import App
from memplane.server.retrieval.service import SearchMode, SearchRequest
from tests.fix_server import random_workspace_name
from tests.integration.conftest import TenantFactory, principal
from tests.support import unit_vectors

ROWS: dict[str, dict[str, Any]] = {
    "m1": {"n": 1, "tag": "a", "tags": ["x", "y"], "project": {"stage": "beta", "prio": 2}, "note": "hello world"},
    "m2": {"n": 10, "tag": "b", "tags": ["y"], "project": {"stage": "ga", "prio": 1}},
    "m3": {"n": "10", "tag": "c", "flag": True},
    "m4": {"n": 2.5, "tags": "xyz"},
    "m5": {},
    "m6": {"it's": "o'k", "weird.key": 1},
}
ALL = set(ROWS)


def c(key: str, op: Operator, value: Any = None) -> Condition:
    return Condition(tuple(key.split(".")), op, value)


CASES: list[tuple[str, MetadataExpr, set[str]]] = [
    ("eq number", c("n", Operator.EQ, 10), {"m2"}),
    ("eq number as float", c("n", Operator.EQ, 10.0), {"m2"}),
    ("eq string is not the number", c("n", Operator.EQ, "10"), {"m3"}),
    ("eq bool", c("flag", Operator.EQ, True), {"m3"}),
    ("eq list", c("tags", Operator.EQ, ["y"]), {"m2"}),
    ("ne counts absent keys", c("tag", Operator.NE, "a"), ALL - {"m1"}),
    ("lt number", c("n", Operator.LT, 5), {"m1", "m4"}),
    ("lte number", c("n", Operator.LTE, 10), {"m1", "m2", "m4"}),
    ("gt number", c("n", Operator.GT, 1), {"m2", "m4"}),
    ("gte number", c("n", Operator.GTE, 10), {"m2"}),
    ("gt fraction", c("n", Operator.GT, 2.4), {"m2", "m4"}),
    ("gt string is lexicographic", c("n", Operator.GT, "1"), {"m3"}),
    ("lt string: '10' < '2'", c("n", Operator.LT, "2"), {"m3"}),
    ("in strings", c("tag", Operator.IN, ["a", "c", "zz"]), {"m1", "m3"}),
    ("in mixed types", c("n", Operator.IN, [10, "10"]), {"m2", "m3"}),
    ("in empty list", c("tag", Operator.IN, []), set()),
    ("contains: list element or substring", c("tags", Operator.CONTAINS, "y"), {"m1", "m2", "m4"}),
    ("contains in a list only", c("tags", Operator.CONTAINS, "x"), {"m1", "m4"}),
    ("contains a number in a list", c("project.prio", Operator.CONTAINS, 2), set()),
    ("contains in a string", c("tags", Operator.CONTAINS, "yz"), {"m4"}),
    ("contains a word", c("note", Operator.CONTAINS, "world"), {"m1"}),
    ("contains a number in a string is false", c("note", Operator.CONTAINS, 1), set()),
    ("exists", c("flag", Operator.EXISTS), {"m3"}),
    ("exists nested", c("project.stage", Operator.EXISTS), {"m1", "m2"}),
    ("nested eq", c("project.stage", Operator.EQ, "beta"), {"m1"}),
    ("nested gt", c("project.prio", Operator.GT, 1), {"m1"}),
    ("nested key under a non-object", c("tag.x", Operator.EXISTS), set()),
    ("and", All((c("project", Operator.EXISTS), c("project.prio", Operator.LT, 2))), {"m2"}),
    ("or", AnyOf((c("tag", Operator.EQ, "a"), c("flag", Operator.EQ, True))), {"m1", "m3"}),
    ("not exists", Not(c("tags", Operator.EXISTS)), {"m3", "m5", "m6"}),
    ("not eq equals ne", Not(c("tag", Operator.EQ, "a")), ALL - {"m1"}),
    ("not of a type-mismatched comparison is true", Not(c("n", Operator.GT, 1)), {"m1", "m3", "m5", "m6"}),
    (
        "and of or and not",
        All(
            (
                AnyOf((c("tag", Operator.EQ, "a"), c("tag", Operator.EQ, "b"))),
                Not(c("project.stage", Operator.EQ, "ga")),
            )
        ),
        {"m1"},
    ),
    ("quote in key and value", c("it's", Operator.EQ, "o'k"), {"m6"}),
    ("a dot always splits keys", c("weird.key", Operator.EXISTS), set()),
    ("injection attempt is just a value", c("tag", Operator.EQ, "a'); DELETE FROM memories; --"), set()),
]


@pytest.fixture(scope="module")
async def filter_workspace(app: App) -> AsyncIterator[Workspace]:
    """One workspace holding ROWS (content = row name), shared by the cases below."""
    ws = await app.admin.create_workspace(random_workspace_name())
    vectors = unit_vectors(len(ROWS), seed=7)
    await app.writeback.add(
        principal(ws),
        ws,
        [
            NewMemory(content=f"row {name}", metadata=meta, embedding=tuple(vectors[i]))
            for i, (name, meta) in enumerate(ROWS.items())
        ],
    )
    yield ws
    await app.admin.delete_workspace(ws.name)


@pytest.mark.parametrize(("expr", "expected"), [pytest.param(e, x, id=i) for i, e, x in CASES])
async def test_list_applies_the_filter(
    app: App, filter_workspace: Workspace, expr: MetadataExpr, expected: set[str]
) -> None:
    page = await app.retrieval.list(filter_workspace, MemoryFilter(metadata=expr), 100, "")
    assert {m.content.removeprefix("row ") for m in page.memories} == expected
    assert page.total_size == len(expected)


async def test_search_applies_the_filter_before_ranking(app: App, filter_workspace: Workspace) -> None:
    # Lexically every row matches "row"; the filter must cut candidates, not hits after top_k.
    result = await app.retrieval.search(
        filter_workspace,
        SearchRequest(
            queries=("row",),
            top_k=1,
            mode=SearchMode.LEXICAL,
            filter=MemoryFilter(metadata=c("tag", Operator.IN, ["c"])),
        ),
    )
    assert [h.memory.content for h in result.hits] == ["row m3"]


async def test_filters_in_one_workspace_never_reach_another(
    app: App, filter_workspace: Workspace, tenant_factory: TenantFactory
) -> None:
    other = await tenant_factory()
    await app.writeback.add(
        principal(other),
        other,
        [NewMemory(content="row m1", metadata=ROWS["m1"], embedding=tuple(unit_vectors(1, seed=8)[0]))],
    )
    page = await app.retrieval.list(filter_workspace, MemoryFilter(metadata=c("tag", Operator.EQ, "a")), 100, "")
    assert page.total_size == 1
    page_other = await app.retrieval.list(other, MemoryFilter(metadata=c("tag", Operator.EQ, "a")), 100, "")
    assert page_other.total_size == 1
    assert page.memories[0].id != page_other.memories[0].id
