"""The partition analyzer (`memplane.server.storage.statistics`) under what a hostile
cluster admin or user does to it, against the real database: its ANALYZE's backend
terminated or cancelled, the partition locked by another session, the workspace deleted
under the running job, the job stopped while its ANALYZE waits, and writes that roll back
or store nothing.

To hold an ANALYZE in flight a test locks the partition's `pg_statistic` rows FOR UPDATE
in a session of its own: the ANALYZE writes its statistics with a plain catalog update,
which waits for that row lock (with the partition's SHARE UPDATE EXCLUSIVE lock held)
until the session ends, the statement is cancelled or the analyzer's lock timeout passes
(the tests' analyzers wait up to HOLD_MS). Workspaces are written fewer rows than the threshold through the session's
server, so the session's own analyzer never touches them; the test's private analyzer is
told of the writes by hand (`wrote`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from memplane.client import AsyncMemplaneClient
from memplane.errors import QuotaExceededError
from memplane.server.app import PARTITION_ANALYZER, App, build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve
from memplane.server.settings import AnalyzeSettings
from memplane.server.storage.statistics import DEFAULT_THRESHOLD, LOCK_TIMEOUT_MS, PartitionAnalyzer
from memplane.server.storage.workspaces import partition_name
from tests.fix_server import TestWorkspace, WorkspaceFactory, settings_for
from tests.support import mem, owner_value, unit_vectors, workspace_key

LATER = 3_600.0  # seconds: a "now" past any quiet period
PROMPT = 5.0  # seconds: "promptly" (the pool's statement_timeout, which a wait would run into, is 30 s)
POLL = 0.01  # seconds between looks at pg_stat_activity / the job's counters (they raise no event)
HOLD_MS = 60_000  # a test's analyzer waits this long for a lock, so the test can hold its ANALYZE
SEED_ROWS = 10  # rows a test writes itself: below the threshold, so the session's analyzer leaves them alone


def _analyze_sql(table: str) -> str:
    """The analyzer's statement text for *table*, as pg_stat_activity shows it."""
    return f'ANALYZE "{table}"'


async def _seed(workspace: TestWorkspace, pg_dsn: str, rows: int = SEED_ROWS) -> tuple[int, str]:
    """Write *rows* memories (below the threshold) and ANALYZE the partition as the owner,
    so it has pg_statistic rows to lock; the workspace's key and partition."""
    vectors = unit_vectors(rows, seed=rows)
    await workspace.client.add_memories([mem(f"seed {i}", user_id="u", embedding=v) for i, v in enumerate(vectors)])
    key = await workspace_key(pg_dsn, workspace.name)
    table = partition_name("memories", key)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
    return key, table


@contextlib.asynccontextmanager
async def _statistics_locked(pg_dsn: str, table: str) -> AsyncIterator[psycopg.AsyncConnection]:
    """*table*'s pg_statistic rows locked FOR UPDATE until the block ends: an ANALYZE of it
    then waits, holding the partition's lock, at its catalog update."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM pg_statistic WHERE starelid = to_regclass(%s) FOR UPDATE) s",
            (table,),
        )
        row = await cur.fetchone()
        assert row is not None
        assert row[0] > 0, f"{table} has no statistics to lock"
        try:
            yield conn
        finally:
            await conn.rollback()


async def _analyze_backend(pg_dsn: str, table: str, *, waiting: bool = True) -> int:
    """The pid of the backend running the analyzer's ANALYZE of *table* (waiting on a lock
    when *waiting*), once there is one (PROMPT x 4 at most)."""
    query = "SELECT pid FROM pg_stat_activity WHERE query = %s AND state = 'active'"
    if waiting:
        query += " AND wait_event_type = 'Lock'"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            async with asyncio.timeout(PROMPT * 4):
                while True:
                    row = await (await conn.execute(query, (_analyze_sql(table),))).fetchone()
                    if row is not None:
                        return int(row[0])
                    await asyncio.sleep(POLL)
        except TimeoutError:
            pytest.fail(f"no ANALYZE of {table} {'waiting' if waiting else 'running'}")


async def _analyze_backends(pg_dsn: str, table: str) -> int:
    """Backends running the analyzer's ANALYZE of *table* now."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE query = %s AND state = 'active'"
    return int(await owner_value(pg_dsn, query, (_analyze_sql(table),)))


async def _until_no_analyze(pg_dsn: str, table: str, what: str) -> None:
    try:
        async with asyncio.timeout(PROMPT):
            while await _analyze_backends(pg_dsn, table):  # noqa: ASYNC110  # pg_stat_activity raises no event
                await asyncio.sleep(POLL)
    except TimeoutError:
        pytest.fail(f"the ANALYZE of {table} still runs {PROMPT} s after {what}, holding the partition's lock")


async def _until_up(app: App) -> None:
    """Until every cluster of *app* is up again (a terminated backend marks its cluster down)."""
    async with asyncio.timeout(30):
        for db in app.routed.primaries():
            while not await db.availability.wait_up(1.0):
                pass


async def _until(predicate: object, what: str, seconds: float = 30.0) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not predicate():  # type: ignore[operator]  # noqa: ASYNC110  # a counter raises no event
                await asyncio.sleep(POLL)
    except TimeoutError:
        pytest.fail(f"timed out waiting until {what}")


def _private(app: App, **kwargs: float) -> PartitionAnalyzer:
    """An analyzer of the app's database that the test drives itself; its ANALYZE waits
    for a lock up to HOLD_MS unless told otherwise (so a test can hold one in flight)."""
    return PartitionAnalyzer(app.routed, **{"quiet_seconds": 1.0, "lock_timeout_ms": HOLD_MS, **kwargs})  # type: ignore[arg-type]


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.endswith("statistics") and r.levelno >= logging.ERROR]


@contextlib.asynccontextmanager
async def _job(app: App, caplog: pytest.LogCaptureFixture, **kwargs: float) -> AsyncIterator[PartitionAnalyzer]:
    """A `_private` analyzer running as the job. After the test's body: it is still
    running and nothing was logged at ERROR. Stopped however the body ends."""
    analyzer = _private(app, **kwargs)
    analyzer.start()
    try:
        yield analyzer
        assert analyzer.running
        assert _errors(caplog) == []
    finally:
        await analyzer.stop()


# -- the database connection lost or cancelled mid-ANALYZE ----------------------------------


# A cancelled ANALYZE (pg_cancel_backend by an admin, or the pool's statement_timeout on a
# big partition) reaches the analyzer as `DeadlineExceededError` (Database._connection
# turns QueryCanceled into it), a terminated one as `UnavailableError`: either is a failure,
# kept for the next try, never an error out of analyze_due (the cancel once escaped: the
# round's other workspaces went untried, and the job logged it at ERROR).
@pytest.mark.parametrize("signal", ["pg_terminate_backend", "pg_cancel_backend"])
async def test_an_analyze_ended_in_flight_is_a_failure_kept_for_the_next_try(
    app: App, workspace: TestWorkspace, pg_dsn: str, signal: str
) -> None:
    key, table = await _seed(workspace, pg_dsn)
    analyzer = _private(app)
    analyzer.wrote(key, DEFAULT_THRESHOLD)
    async with _statistics_locked(pg_dsn, table):
        running = asyncio.create_task(analyzer.analyze_due(time.monotonic() + LATER))
        pid = await _analyze_backend(pg_dsn, table)
        assert await owner_value(pg_dsn, f"SELECT {signal}(%s)", (pid,))
        async with asyncio.timeout(PROMPT):
            done = await running  # raises, or hangs, on a bug
    assert done == []
    assert analyzer.stats.failures == 1
    assert analyzer.stats.analyzed == 0
    assert analyzer.due(time.monotonic() + LATER) == [key], "the count is kept for the next try"

    await _until_up(app)
    assert await analyzer.analyze_due(time.monotonic() + LATER) == [key]
    assert analyzer.stats.failures == 1
    assert analyzer.due(time.monotonic() + LATER) == []


async def test_the_running_job_survives_a_terminated_analyze_and_retries(
    app: App, workspace: TestWorkspace, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    key, table = await _seed(workspace, pg_dsn)
    async with _job(app, caplog, quiet_seconds=0.2) as analyzer:
        async with _statistics_locked(pg_dsn, table):
            analyzer.wrote(key, DEFAULT_THRESHOLD)  # doubled: analyzed at once
            pid = await _analyze_backend(pg_dsn, table)
            assert await owner_value(pg_dsn, "SELECT pg_terminate_backend(%s)", (pid,))
            await _until(lambda: analyzer.stats.failures >= 1, "the job counts the failure")
            assert analyzer.running
            assert analyzer.stats.analyzed == 0
        # The lock gone: the job's retry (after its back-off) analyzes the workspace.
        await _until(lambda: analyzer.stats.analyzed == 1, "the job's retry analyzes the workspace")
        assert analyzer.due(time.monotonic() + LATER) == []


async def test_a_cancelled_analyze_does_not_stop_the_round_nor_log_an_error(
    app: App, workspace_factory: WorkspaceFactory, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = await workspace_factory(), await workspace_factory()
    key, table = await _seed(first, pg_dsn)
    other, _ = await _seed(second, pg_dsn)
    assert key < other  # `due` lists by key: the cancelled one comes first in the round
    async with _job(app, caplog, quiet_seconds=60.0) as analyzer, _statistics_locked(pg_dsn, table):
        analyzer.wrote(key, DEFAULT_THRESHOLD)
        analyzer.wrote(other, DEFAULT_THRESHOLD)
        pid = await _analyze_backend(pg_dsn, table)
        assert await owner_value(pg_dsn, "SELECT pg_cancel_backend(%s)", (pid,))
        await _until(lambda: analyzer.stats.failures >= 1, "the job counts the failure")
        # The round goes on to the other workspace (its retry of the first waits 60 s).
        await _until(lambda: analyzer.stats.analyzed == 1, "the round's other workspace is analyzed", PROMPT)


# -- another session's locks ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["SHARE UPDATE EXCLUSIVE", "ACCESS EXCLUSIVE"])
async def test_a_partition_locked_by_another_session_is_not_waited_for_and_tried_again(
    app: App, workspace: TestWorkspace, pg_dsn: str, mode: str
) -> None:
    key, table = await _seed(workspace, pg_dsn)
    analyzer = _private(app, lock_timeout_ms=LOCK_TIMEOUT_MS)
    analyzer.wrote(key, DEFAULT_THRESHOLD)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        await holder.execute(sql.SQL("LOCK TABLE {} IN " + mode + " MODE").format(sql.Identifier(table)))
        try:
            async with asyncio.timeout(PROMPT):  # a wait would last until statement_timeout (30 s)
                await analyzer.analyze_due(time.monotonic() + LATER)
        except TimeoutError:
            pytest.fail(f"the ANALYZE waited for the {mode} lock another session holds")
        assert await _analyze_backends(pg_dsn, table) == 0
        row = await (await holder.execute("SELECT 1")).fetchone()  # the holder's transaction is untouched
        assert row == (1,)
        await holder.rollback()
    assert analyzer.stats.failures == 1, "the lock not granted within the lock timeout: a failure"
    assert analyzer.stats.analyzed == 0
    assert analyzer.due(time.monotonic() + LATER) == [key], "kept for the next try"
    assert await analyzer.analyze_due(time.monotonic() + LATER) == [key], "the lock gone: analyzed"


async def test_a_lock_on_the_parent_tables_and_their_partitions_is_not_waited_for(
    app: App, workspace: TestWorkspace, pg_dsn: str
) -> None:
    """A LOCK TABLE of a parent without ONLY (a migration's, an administrator's) holds
    every partition ACCESS EXCLUSIVE too: the ANALYZE of a partition must not queue behind
    that (every tenant statement would queue behind it in turn); it fails within its lock
    timeout and is tried again once the lock is gone."""
    key, _ = await _seed(workspace, pg_dsn)
    analyzer = _private(app, lock_timeout_ms=LOCK_TIMEOUT_MS)
    analyzer.wrote(key, DEFAULT_THRESHOLD)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        await holder.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        try:
            async with asyncio.timeout(PROMPT):
                assert await analyzer.analyze_due(time.monotonic() + LATER) == []
        except TimeoutError:
            pytest.fail("the ANALYZE of a partition waited for the lock on its parent")
        finally:
            await holder.rollback()
    assert analyzer.stats.failures == 1
    assert await analyzer.analyze_due(time.monotonic() + LATER) == [key], "the lock gone: analyzed"


async def test_a_deletion_during_an_analyze_of_its_partition_waits_for_it_and_completes(
    app: App, workspace: TestWorkspace, pg_dsn: str, admin_client: AsyncMemplaneClient,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """An ANALYZE holds its partition SHARE UPDATE EXCLUSIVE while it runs. The deletion of
    its workspace locks that workspace's partitions (`workspaces._outwait_vacuum`, then its
    DDL's tries, ~20 s in all), so it waits for the ANALYZE and must complete once it ends,
    leaving the analyzer nothing due and no error."""
    key, table = await _seed(workspace, pg_dsn)
    async with _job(app, caplog) as analyzer:
        async with _statistics_locked(pg_dsn, table):
            analyzer.wrote(key, DEFAULT_THRESHOLD)
            await _analyze_backend(pg_dsn, table)
            deleting = asyncio.create_task(admin_client.delete_workspace(workspace.name))
            query = (
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND wait_event_type = 'Lock'"
                " AND query LIKE 'LOCK TABLE %%'"
            )
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
                async with asyncio.timeout(PROMPT * 4):  # the deletion queued behind the ANALYZE
                    while not (await (await conn.execute(query, (f'%"{table}"%',))).fetchone())[0]:  # type: ignore[index]  # noqa: ASYNC110
                        await asyncio.sleep(POLL)  # pg_stat_activity raises no event
            assert not deleting.done()
        # The ANALYZE ends with the row lock: the deletion's next try goes through.
        async with asyncio.timeout(PROMPT * 2):
            await deleting
        await _until(lambda: analyzer.stats.analyzed == 1, "the ANALYZE in flight is counted")
        assert analyzer.due(time.monotonic() + LATER) == []
        assert analyzer.stats.failures == 0


async def test_a_deletion_of_another_workspace_does_not_wait_for_an_analyze(
    app: App, workspace_factory: WorkspaceFactory, pg_dsn: str, admin_client: AsyncMemplaneClient,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The deletion of a workspace locks the parent tables ONLY and its own partitions
    (`workspaces._lock_parents`): an ANALYZE of another workspace's partition, however long,
    holds nothing it needs, so it completes while the ANALYZE still runs (a LOCK TABLE of
    the parents that recursed into every partition queued behind it, and so did every
    creation and deletion on the cluster)."""
    analyzed = await workspace_factory()
    doomed = await workspace_factory()
    key, table = await _seed(analyzed, pg_dsn)
    async with _job(app, caplog) as analyzer:
        async with _statistics_locked(pg_dsn, table):
            analyzer.wrote(key, DEFAULT_THRESHOLD)
            await _analyze_backend(pg_dsn, table)
            try:
                async with asyncio.timeout(PROMPT):
                    await admin_client.delete_workspace(doomed.name)
            except TimeoutError:
                pytest.fail(f"the deletion of another workspace waited for the ANALYZE of {table}")
            assert await _analyze_backends(pg_dsn, table) == 1, "the ANALYZE still runs"
        await _until(lambda: analyzer.stats.analyzed == 1, "the ANALYZE in flight is counted")
        assert analyzer.stats.failures == 0


# -- deletion races --------------------------------------------------------------------------


async def test_workspaces_deleted_under_the_running_job_are_forgotten_without_an_error(
    app: App, workspace_factory: WorkspaceFactory, pg_dsn: str, admin_client: AsyncMemplaneClient,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    async with _job(app, caplog, quiet_seconds=0.05) as analyzer:
        made = [await workspace_factory() for _ in range(6)]
        keys = [await workspace_key(pg_dsn, ws.name) for ws in made]
        # Half told of their writes as the deletion starts (the job's ANALYZE races the
        # DROP), half told only after their deletion committed (a late after-commit count).
        for ws, key in zip(made[:3], keys[:3], strict=True):
            analyzer.wrote(key, DEFAULT_THRESHOLD)
            await admin_client.delete_workspace(ws.name)
        for ws, key in zip(made[3:], keys[3:], strict=True):
            await admin_client.delete_workspace(ws.name)
            analyzer.wrote(key, DEFAULT_THRESHOLD + 1)
        await _until(lambda: analyzer.due(time.monotonic() + LATER) == [], "nothing deleted is left due")
        assert analyzer.stats.failures == 0


# -- stopping ---------------------------------------------------------------------------------


async def test_stop_while_the_analyze_waits_returns_promptly_and_ends_the_statement(
    app: App, workspace: TestWorkspace, pg_dsn: str
) -> None:
    key, table = await _seed(workspace, pg_dsn)
    analyzer = _private(app)
    analyzer.start()
    try:
        async with _statistics_locked(pg_dsn, table):
            analyzer.wrote(key, DEFAULT_THRESHOLD)
            await _analyze_backend(pg_dsn, table)
            try:
                async with asyncio.timeout(PROMPT):
                    await analyzer.stop()
            except TimeoutError:
                pytest.fail("stop() waited for the ANALYZE in flight")
            assert not analyzer.running
            # The lock still held: the statement can only have ended by being cancelled.
            await _until_no_analyze(pg_dsn, table, "stop()")
    finally:
        await analyzer.stop()


async def test_stop_while_the_job_waits_for_a_pause_returns_promptly(
    app: App, workspace: TestWorkspace, pg_dsn: str
) -> None:
    key, _ = await _seed(workspace, pg_dsn)
    analyzer = _private(app, quiet_seconds=3_600.0, threshold=1, scale_factor=0.0)
    assert await analyzer.analyze_due() == []  # nothing written yet
    analyzer.wrote(key, 1)
    assert await analyzer.analyze_due() == [key]  # an empty partition's first: at once; now 10 rows
    analyzer.start()
    analyzer.wrote(key, 1)  # due, not doubled: the job waits an hour for a pause
    await asyncio.sleep(0)  # let the job reach its wait
    assert analyzer.running
    async with asyncio.timeout(PROMPT):
        await analyzer.stop()
    assert not analyzer.running
    assert analyzer.stats.analyzed == 1


@pytest.fixture
async def own_app(
    pg_dsn: str, admin_key: str, embedder: CachedEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[App, str]]:
    """An App of its own over the session database, its jobs started, served on a free
    port: (the app, its target). Closed after the test unless the test closed it."""
    settings = settings_for(tmp_path_factory.mktemp("analyzer-faults"), pg_dsn, admin_key)
    settings = settings.model_copy(update={"analyze": AnalyzeSettings(lock_timeout_ms=HOLD_MS)})  # holdable
    app = await build_app(settings, embedder=embedder)
    app.start()
    running = await serve(app, host="127.0.0.1", port=0)
    yield app, f"127.0.0.1:{running.port}"
    await running.stop(0)
    await app.close()


def _jobs_analyzer(app: App) -> PartitionAnalyzer:
    analyzer = app.jobs[PARTITION_ANALYZER]
    assert isinstance(analyzer, PartitionAnalyzer)
    return analyzer


async def test_app_close_while_the_analyze_waits_returns_promptly(
    own_app: tuple[App, str], workspace: TestWorkspace, pg_dsn: str
) -> None:
    app, _ = own_app
    key, table = await _seed(workspace, pg_dsn)
    analyzer = _jobs_analyzer(app)
    assert analyzer.running
    async with _statistics_locked(pg_dsn, table):
        analyzer.wrote(key, DEFAULT_THRESHOLD)
        await _analyze_backend(pg_dsn, table)
        started = time.monotonic()
        async with asyncio.timeout(PROMPT * 4):
            finished = await app.close()
        assert finished, "a step of close() was abandoned at its bound"
        assert time.monotonic() - started < PROMPT
        assert not analyzer.running
        await _until_no_analyze(pg_dsn, table, "app.close()")


# -- counting: only rows a committed write stored ---------------------------------------------


@pytest.fixture
async def counting(own_app: tuple[App, str]) -> tuple[PartitionAnalyzer, str]:
    """The own app's analyzer, stopped (it still counts, and never analyzes), and the app's target."""
    app, target = own_app
    analyzer = _jobs_analyzer(app)
    await analyzer.stop()
    return analyzer, target


async def test_an_add_refused_by_the_quota_is_not_counted(
    counting: tuple[PartitionAnalyzer, str], workspace_factory: WorkspaceFactory, pg_dsn: str
) -> None:
    analyzer, target = counting
    ws = await workspace_factory(max_memories=40)
    key = await workspace_key(pg_dsn, ws.name)
    vectors = unit_vectors(70, seed=7)
    async with AsyncMemplaneClient(target, ws.key) as client:
        await client.add_memories([mem(f"kept {i}", embedding=vectors[i]) for i in range(30)])
        with pytest.raises(QuotaExceededError):  # 30 + 40 > 40: rolled back
            await client.add_memories([mem(f"refused {i}", embedding=vectors[i]) for i in range(30, 70)])
    assert analyzer.due(time.monotonic() + LATER) == [], "30 stored: below the threshold"
    analyzer.wrote(key, DEFAULT_THRESHOLD - 30)
    assert analyzer.due(time.monotonic() + LATER) == [key], "the 30 stored were counted"


# AddMemories items not stored — duplicates of a current memory, or a whole request replayed
# under its request id — are not counted: the count is read from the insert's outcome (it
# once counted the items sent, so a user could make the server ANALYZE a partition
# without storing a row).
@pytest.mark.parametrize(
    "request_id",
    [pytest.param("", id="duplicates under a new request id"), pytest.param("analyzer-replay-1", id="a replay")],
)
async def test_the_same_items_added_again_store_nothing_and_are_not_counted(
    counting: tuple[PartitionAnalyzer, str], workspace: TestWorkspace, pg_dsn: str, request_id: str
) -> None:
    analyzer, target = counting
    key = await workspace_key(pg_dsn, workspace.name)
    vectors = unit_vectors(30, seed=30)
    items = [mem(f"same note {i}", user_id="u", embedding=v) for i, v in enumerate(vectors)]
    async with AsyncMemplaneClient(target, workspace.key) as client:
        first = await client.add_memories_reply(items, request_id=request_id)
        again = await client.add_memories_reply(items, request_id=request_id)
    assert [m.id for m in again.memories] == [m.id for m in first.memories], "answered with the stored memories"
    assert int(await owner_value(pg_dsn, "SELECT count(*) FROM memories WHERE workspace_key = %s", (key,))) == 30
    assert analyzer.due(time.monotonic() + LATER) == [], "30 rows stored, 60 counted"
