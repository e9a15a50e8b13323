"""Which writes the vector indexer takes (`VectorIndexer.defers`): calls of at most
max_deferred memories while the workspace's backlog, counted since its last pass, is
under max_backlog; each workspace counted apart."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from pydantic import ValidationError

from memplane.errors import UnavailableError
from memplane.server.settings import Settings
from memplane.server.storage.database import Database
from memplane.server.storage.vector_index import VectorIndexer


def _indexer(**kwargs: int) -> VectorIndexer:
    return VectorIndexer(cast(Database, object()), **kwargs)  # the policy touches no database


def test_small_writes_wait_and_a_batch_over_max_deferred_does_not() -> None:
    indexer = _indexer(max_deferred=4, max_backlog=10)
    assert indexer.defers(1, 1)
    assert indexer.defers(1, 4)
    assert not indexer.defers(1, 5)


def test_a_backlog_at_max_backlog_sends_writes_into_the_graph_until_the_next_pass() -> None:
    indexer = _indexer(max_deferred=4, max_backlog=10)
    indexer.mark(1, 4)
    indexer.mark(1, 4)
    assert indexer.defers(1, 4)  # 8 waiting
    indexer.mark(1, 4)
    assert not indexer.defers(1, 1)  # 12 waiting: at the cap
    assert indexer.defers(2, 4)  # another workspace's backlog is its own


def test_zero_max_deferred_defers_nothing() -> None:
    assert not _indexer(max_deferred=0).defers(1, 1)


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"max_deferred": -1}, {"max_backlog": -1}])
def test_bad_sizes_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        _indexer(**kwargs)


class _Unreachable:
    """A database every transaction of which fails (as while PostgreSQL is down)."""

    def admin(self) -> Any:
        raise UnavailableError("database unreachable")

    def tenant(self, workspace_key: int, lock_timeout_ms: int = 0) -> Any:
        raise UnavailableError("database unreachable")


async def test_a_failed_pass_keeps_its_rows_counted_toward_max_backlog() -> None:
    # The pass takes the workspaces' counts when it starts; on the code before, a failed
    # pass put its workspaces back with a count of 0, so while passes kept failing every
    # small write was left to the indexer again: a backlog without bound, for every
    # search to scan exactly.
    indexer = VectorIndexer(cast(Database, _Unreachable()), interval_seconds=0.01, max_deferred=4, max_backlog=10)
    indexer.mark(1, 4)
    indexer.mark(1, 4)
    indexer.mark(1, 4)  # 12 waiting: at the cap
    indexer.start()
    try:
        async with asyncio.timeout(10):
            while True:
                if indexer.stats.failures >= 2:
                    break
                await asyncio.sleep(0.01)  # between looks at the indexer's count of failed passes
    finally:
        await indexer.stop()
    assert not indexer.defers(1, 1)  # still 12 waiting: writes enter the graph themselves
    assert indexer.defers(2, 1)


@pytest.mark.parametrize(
    ("field", "value"),
    [("interval_seconds", 0), ("interval_seconds", 61), ("scan_interval_seconds", -1), ("batch_size", 0),
     ("max_deferred", -1), ("max_backlog", -1)],
)  # fmt: skip
def test_vector_index_settings_out_of_range_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(vector_index={field: value})  # type: ignore[arg-type]
    assert [e["loc"] for e in caught.value.errors()] == [("vector_index", field)]
