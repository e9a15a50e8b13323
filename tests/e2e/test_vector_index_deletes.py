"""Deletes meet the vector indexer's backlog (migration 0020) over real gRPC: memories
deleted, erased by scope or updated (re-embedded) while outside the HNSW graph, and a
workspace deleted with its backlog, then the indexer's pass. A graph-walking search
(exact_scan_max_rows 0) never returns what was deleted, finds the new text of an updated
memory once, and the pass neither fails nor stops at the deleted workspace: the next
workspace's backlog is indexed in the same pass, and the counts stay exact."""

from __future__ import annotations

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError
from memplane.v1 import memory_pb2, retrieval_pb2
from tests.e2e.test_vector_index import TOPICS, Held, _flags, _key, held  # noqa: F401 - the fixture
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import mem

VECTOR = retrieval_pb2.SEARCH_MODE_VECTOR
HYBRID = retrieval_pb2.SEARCH_MODE_HYBRID
NEW_TEXT = "The submarine captain collects antique sea charts."


async def _ids(client: AsyncMemplaneClient, query: str, mode: int = VECTOR) -> list[str]:
    return [h.memory.id for h in (await client.search(query, top_k=10, mode=mode)).hits]


async def _counts(pg_dsn: str, workspace_key: int) -> tuple[int, int]:
    """(rows, the counters' memory_count), read as the database owner."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM memories WHERE workspace_key = %(k)s),"
            " (SELECT memory_count FROM workspace_stats WHERE workspace_key = %(k)s)",
            {"k": workspace_key},
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_deleted_and_updated_memories_of_the_backlog_before_and_after_the_pass(
    held: Held,  # noqa: F811 - the imported fixture
    workspace: TestWorkspace,
    pg_dsn: str,
) -> None:
    key = await _key(pg_dsn, workspace)
    async with AsyncMemplaneClient(held.target, workspace.key) as client:
        stored = [(await client.add_memories([mem(t, user_id=f"u{i % 2}")]))[0] for i, t in enumerate(TOPICS)]
        assert await _flags(pg_dsn, key) == [False] * len(TOPICS)
        updated = await client.update_memory(stored[0].id, mem(NEW_TEXT), ["content"])
        await client.delete_memory(stored[2].id)
        await client.delete_memories_by_scope(memory_pb2.Scope(user_id="u1"))  # the odd ones
        kept = {m.id for i, m in enumerate(stored) if i % 2 == 0 and i != 2}

        for phase in ("backlog", "graph"):
            for mode in (VECTOR, HYBRID):
                found = await _ids(client, NEW_TEXT, mode)
                assert found[0] == updated.id, phase  # the new text, found once
                assert len(found) == len(set(found)) == len(kept), phase
                assert set(found) == kept, phase  # nothing deleted comes back
            assert (await client.list_memories()).total_size == len(kept)
            assert await _counts(pg_dsn, key) == (len(kept), len(kept))
            if phase == "backlog":
                assert await held.indexer.run_once({key}) == len(kept)
                assert await _flags(pg_dsn, key) == [True] * len(kept)
    assert held.indexer.stats.failures == 0


async def test_a_workspace_deleted_with_its_backlog_does_not_stop_the_pass(
    held: Held,  # noqa: F811 - the imported fixture
    workspace_factory: WorkspaceFactory,
    admin_client: AsyncMemplaneClient,
    pg_dsn: str,
) -> None:
    gone, kept = await workspace_factory(), await workspace_factory()
    gone_key, kept_key = await _key(pg_dsn, gone), await _key(pg_dsn, kept)
    assert gone_key < kept_key  # the pass meets the deleted one first
    for ws in (gone, kept):
        async with AsyncMemplaneClient(held.target, ws.key) as client:
            await client.add_memories([mem(t) for t in TOPICS[:4]])
    await admin_client.delete_workspace(gone.name)
    with pytest.raises(NotFoundError):
        await admin_client.get_workspace(gone.name)

    assert await held.indexer.run_once({gone_key, kept_key}) == 4
    assert await _flags(pg_dsn, kept_key) == [True] * 4
    assert await held.indexer.run_once() == 0  # no backlog left anywhere the scan looks
