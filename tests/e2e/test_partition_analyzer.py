"""Planner statistics follow a burst of writes (`memplane.server.storage.statistics`): a
workspace written one memory per AddMemories call has its partition ANALYZEd by the
server once the writes pause, without waiting for autovacuum; a workspace below the
threshold is left to autovacuum; one deleted before its turn is forgotten without an error."""

from __future__ import annotations

import asyncio
import time

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.server.app import PARTITION_ANALYZER, App
from memplane.server.storage.statistics import DEFAULT_THRESHOLD, PartitionAnalyzer
from memplane.server.storage.workspaces import partition_name
from tests.fix_server import TestWorkspace
from tests.support import mem, owner_value, workspace_key

LATER = 3_600.0  # seconds: a "now" past any quiet period


async def _add_one_at_a_time(client: AsyncMemplaneClient, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        await client.add_memories([mem(f"note {i}: the ferry to the island leaves at {i % 24}:15", user_id="u")])


async def _manual_analyzes(pg_dsn: str, table: str) -> int:
    """ANALYZE runs on *table* that were not autovacuum's (pg_stat_user_tables.analyze_count)."""
    query = "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %s"
    return int(await owner_value(pg_dsn, query, (table,)) or 0)


async def _reltuples(pg_dsn: str, table: str) -> float:
    rows = await owner_value(pg_dsn, "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (table,))
    assert rows is not None, f"no table {table}"
    return float(rows)


def _private(app: App) -> PartitionAnalyzer:
    """An analyzer of the app's database that the test drives itself (not started)."""
    return PartitionAnalyzer(app.routed, quiet_seconds=1.0)


async def test_a_burst_of_adds_is_analyzed_once_it_pauses(app: App, workspace: TestWorkspace, pg_dsn: str) -> None:
    assert isinstance(app.jobs.get(PARTITION_ANALYZER), PartitionAnalyzer), "the server that writes runs the analyzer"
    # 50 rows into an empty partition: analyzed at once (it doubled). 70 more pass 50 + 10 %
    # of 50: analyzed again once the adds pause.
    count = 2 * DEFAULT_THRESHOLD + 20
    await _add_one_at_a_time(workspace.client, count)
    table = partition_name("memories", await workspace_key(pg_dsn, workspace.name))
    async with asyncio.timeout(60):
        while await _reltuples(pg_dsn, table) != count:  # noqa: ASYNC110  # pg_class raises no event
            await asyncio.sleep(0.1)
        # Not autovacuum's: PostgreSQL publishes the count when the backend that ran the
        # ANALYZE next reports its statistics (within ~10 s idle).
        while await _manual_analyzes(pg_dsn, table) < 2:  # noqa: ASYNC110  # a statistics view raises no event
            await asyncio.sleep(0.2)


async def test_a_workspace_is_due_by_autovacuums_rule(app: App, workspace: TestWorkspace, pg_dsn: str) -> None:
    key = await workspace_key(pg_dsn, workspace.name)
    table = partition_name("memories", key)
    analyzer = _private(app)
    analyzer.wrote(key, DEFAULT_THRESHOLD - 1)
    assert analyzer.due(time.monotonic() + LATER) == [], "below the threshold: left to autovacuum"
    analyzer.wrote(key, 1)
    assert analyzer.due(time.monotonic()) == [key], "an empty partition given 50 rows doubled: at once"
    await _add_one_at_a_time(workspace.client, 200)
    assert await analyzer.analyze_due(time.monotonic() + LATER) == [key]
    assert await _reltuples(pg_dsn, table) == 200
    # Now 200 rows: due again after 50 + 0.1 x 200 = 70 rows written, at once after 250.
    analyzer.wrote(key, 69)
    assert analyzer.due(time.monotonic() + LATER) == []
    analyzer.wrote(key, 1)
    assert analyzer.due(time.monotonic() + LATER) == [key]
    assert analyzer.due(time.monotonic()) == [], "due, but written just now: it waits for the pause"
    analyzer.wrote(key, 180)
    assert analyzer.due(time.monotonic()) == [key], "the table doubled: analyzed without waiting for a pause"
    assert analyzer.stats.failures == 0


async def test_a_workspace_deleted_before_its_turn_is_forgotten(
    app: App, workspace: TestWorkspace, pg_dsn: str, admin_client: AsyncMemplaneClient
) -> None:
    key = await workspace_key(pg_dsn, workspace.name)
    analyzer = _private(app)
    analyzer.wrote(key, DEFAULT_THRESHOLD)
    await admin_client.delete_workspace(workspace.name)
    assert await analyzer.analyze_due(time.monotonic() + LATER) == []
    assert analyzer.due(time.monotonic() + LATER) == [], "forgotten, not retried"
    assert analyzer.stats.failures == 0


@pytest.mark.parametrize("bad", [{"quiet_seconds": 0}, {"threshold": -1}, {"scale_factor": -0.1}])
def test_bad_settings_are_refused(app: App, bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="quiet_seconds"):
        PartitionAnalyzer(app.routed, **bad)  # type: ignore[arg-type]
