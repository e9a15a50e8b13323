"""The HNSW graph insert is off the write path (migration 0020, issue 31): a memory is
stored outside its workspace's graph, a search over the graph still finds it (the exact
scan of the backlog), the vector indexer puts it into the graph moments later, and a
backlog a stopped server left is indexed by the next server's start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.server.app import VECTOR_INDEXER, App, build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve
from memplane.server.settings import Settings, VectorIndexSettings
from memplane.server.storage.vector_index import VectorIndexer
from memplane.v1 import retrieval_pb2
from tests.fix_server import TestWorkspace, settings_for
from tests.support import mem

TOPICS = [
    "The lighthouse keeper repainted the lamp room in March.",
    "Our cat refuses to eat anything but salmon pate.",
    "The quarterly budget review moved to the second Thursday.",
    "Maria learned to play the cello at forty-two.",
    "The bridge over the river closes for repairs every winter.",
    "He prefers green tea without sugar in the afternoon.",
    "The robot vacuum keeps getting stuck under the sofa.",
    "Our team ships a release every other Friday.",
    "The bakery on Elm Street sells rye bread only on Saturdays.",
    "She ran her first marathon in Lisbon last October.",
]


@dataclass
class Held:
    """A server whose indexer runs only when the test says (no gather within the test,
    no scan after its start), with every search walking the graph (no exact scan of a
    small scope)."""

    app: App
    target: str

    @property
    def indexer(self) -> VectorIndexer:
        indexer = self.app.jobs[VECTOR_INDEXER]
        assert isinstance(indexer, VectorIndexer)
        return indexer


def _graph_settings(base: Settings, vector_index: VectorIndexSettings) -> Settings:
    retrieval = base.retrieval.model_copy(update={"exact_scan_max_rows": 0})
    return base.model_copy(update={"retrieval": retrieval, "vector_index": vector_index})


@pytest.fixture
async def held(
    pg_dsn: str, admin_key: str, embedder: CachedEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Held]:
    base = settings_for(tmp_path_factory.mktemp("held-indexer"), pg_dsn, admin_key)
    app = await build_app(
        _graph_settings(base, VectorIndexSettings(interval_seconds=60, scan_interval_seconds=24 * 3600.0)),
        embedder=embedder,
    )
    app.start()
    held = Held(app, f"127.0.0.1:{(running := await serve(app, host='127.0.0.1', port=0)).port}")
    # Its scan at start indexes backlogs earlier tests left; a test's own writes must come
    # after it, or that scan could index them before the test does.
    async with asyncio.timeout(60):
        while held.indexer.stats.passes < 1:  # noqa: ASYNC110  # the indexer's count raises no event
            await asyncio.sleep(0.01)
    yield held
    await running.stop(0)
    await app.close()


async def _key(pg_dsn: str, workspace: TestWorkspace) -> int:
    """The workspace's partition key, read as the database owner."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute("SELECT key FROM workspaces WHERE name = %s", (workspace.name,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _flags(pg_dsn: str, workspace_key: int) -> list[bool]:
    """Every memory's vector_indexed flag, read as the database owner."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute("SELECT vector_indexed FROM memories WHERE workspace_key = %s", (workspace_key,))
        return [bool(row[0]) for row in await cur.fetchall()]


async def _top_ids(client: AsyncMemplaneClient, query: str) -> list[str]:
    result = await client.search(query, top_k=5, mode=retrieval_pb2.SEARCH_MODE_VECTOR)
    return [hit.memory.id for hit in result.hits]


async def _wait_for_no_backlog(pg_dsn: str, workspace_key: int, indexer: Any, failures: int) -> None:
    """Until the workspace's memories are all in its graph (30 s at most); an indexing pass
    failing meanwhile (the indexer's failures past *failures*, its count before the test's
    writes: the session's indexer also ran for earlier tests) fails the test at once."""
    deadline = time.monotonic() + 30
    while not all(flags := await _flags(pg_dsn, workspace_key)):
        assert indexer.stats.failures == failures, "a vector indexing pass failed (see the log)"
        assert time.monotonic() < deadline, f"backlog still there after 30 s: {flags}"
        await asyncio.sleep(0.05)  # between looks at the flags


async def test_a_new_memory_waits_outside_the_graph_and_a_search_finds_it(
    held: Held, workspace: TestWorkspace, pg_dsn: str
) -> None:
    key = await _key(pg_dsn, workspace)
    async with AsyncMemplaneClient(held.target, workspace.key) as client:
        stored = await client.add_memories([mem(text, user_id="u1") for text in TOPICS])
        assert await _flags(pg_dsn, key) == [False] * len(TOPICS)  # no graph insert on the write

        before = {text: await _top_ids(client, text) for text in TOPICS}
        for memory, text in zip(stored, TOPICS, strict=True):
            assert before[text][0] == memory.id, text  # found by the backlog's exact scan

        assert await held.indexer.run_once({key}) == len(TOPICS)
        assert await _flags(pg_dsn, key) == [True] * len(TOPICS)
        after = {text: await _top_ids(client, text) for text in TOPICS}
        assert after == before  # the graph walk finds the same five, in the same order

        [late] = await client.add_memories([mem("The lighthouse lamp room got a second coat of paint.")])
        ids = await _top_ids(client, "lighthouse lamp room paint")
        assert late.id in ids[:2]  # a new write beside indexed ones: both legs merge
        assert stored[0].id in ids[:2]


async def test_the_indexer_empties_the_backlog_after_writes(app: App, workspace: TestWorkspace, pg_dsn: str) -> None:
    key = await _key(pg_dsn, workspace)
    indexer = app.jobs[VECTOR_INDEXER]
    assert isinstance(indexer, VectorIndexer)
    failures = indexer.stats.failures
    for start in range(0, 40, 8):
        notes = [mem(f"burst note {i}: {TOPICS[i % len(TOPICS)]}") for i in range(start, start + 8)]
        await workspace.client.add_memories(notes)
    await _wait_for_no_backlog(pg_dsn, key, indexer, failures)
    assert len(await _flags(pg_dsn, key)) == 40


async def test_a_backlog_left_by_a_stopped_server_is_indexed_at_the_next_start(
    held: Held, workspace: TestWorkspace, pg_dsn: str, admin_key: str, embedder: CachedEmbedder,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    key = await _key(pg_dsn, workspace)
    async with AsyncMemplaneClient(held.target, workspace.key) as client:
        await client.add_memories([mem(text) for text in TOPICS[:4]])
    await held.app.close()  # stopped with its backlog: nothing marked survives
    assert await _flags(pg_dsn, key) == [False] * 4

    base = settings_for(tmp_path_factory.mktemp("next-indexer"), pg_dsn, admin_key)
    nxt = await build_app(base, embedder=embedder)
    nxt.start()  # its indexer's first pass scans for every workspace's backlog
    try:
        await _wait_for_no_backlog(pg_dsn, key, nxt.jobs[VECTOR_INDEXER], 0)  # a new indexer: none yet
    finally:
        await nxt.close()


async def test_a_batch_larger_than_max_deferred_enters_the_graph_in_its_own_write(
    held: Held, workspace: TestWorkspace, pg_dsn: str
) -> None:
    key = await _key(pg_dsn, workspace)
    limit = held.app.settings.vector_index.max_deferred
    async with AsyncMemplaneClient(held.target, workspace.key) as client:
        await client.add_memories([mem(f"bulk {i}: {TOPICS[i % len(TOPICS)]}") for i in range(limit + 1)])
        assert await _flags(pg_dsn, key) == [True] * (limit + 1)  # no backlog: a bulk load pays its own graph
        await client.add_memories([mem(f"small {i}: {TOPICS[i % len(TOPICS)]}") for i in range(limit)])
    assert sorted(await _flags(pg_dsn, key)) == [False] * limit + [True] * (limit + 1)
