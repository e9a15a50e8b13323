"""The extraction job table (migration 0012) on a database of its own (no server's
worker can take these jobs): one job per conversation, SKIP LOCKED claims, a lease that
passes to the next claim, an old attempt that can no longer apply, a retry's backoff,
and row-level security."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from memplane.domain.extraction import JobStatus
from memplane.domain.models import Quotas, Retention, Scope, Workspace
from memplane.server.storage.database import Database
from memplane.server.storage.jobs import ExtractionJobStore, dedupe_key
from memplane.server.storage.migrate import apply_migrations
from memplane.server.storage.workspaces import WorkspaceStore, policy_columns
from tests.integration.test_migrations import empty_database  # noqa: F401 - the fixture

SCOPE = Scope(user_id="ana", session_id="s1")
POLICY = policy_columns(quotas=Quotas(), retention=Retention(), labels={}, token_encoding="o200k_base")


@pytest.fixture
async def db(empty_database: str) -> AsyncIterator[Database]:  # noqa: F811 - the imported fixture
    await apply_migrations(empty_database)
    database = Database(empty_database, min_size=1, max_size=4)
    await database.open()
    yield database
    await database.close()


async def make(db: Database, name: str) -> Workspace:
    return await WorkspaceStore(db).create(name, embedding_model="m", embedding_dimensions=4, policy=POLICY)


async def test_a_conversation_is_one_job_and_claims_never_share_one(db: Database) -> None:
    store = ExtractionJobStore()
    ws = await make(db, "jobs-a")
    async with db.tenant(ws.key) as conn:
        first, created = await store.enqueue(conn, ws, SCOPE, ["m1", "m2"], actor="k", request_id="r1")
        again, created_again = await store.enqueue(conn, ws, SCOPE, ["m1", "m2"], actor="k", request_id="r2")
        other, _ = await store.enqueue(conn, ws, SCOPE, ["m3"], actor="k", request_id="")
    assert (created, created_again) == (True, False)
    assert again.id == first.id  # the same message ids: the same job, whatever the request id
    assert dedupe_key(SCOPE, ["#1", "#2"], "r1") == "request:r1"  # server-numbered messages: by request id
    assert first.status is JobStatus.QUEUED

    claims = [await store.claim(db, lease_seconds=60) for _ in range(3)]
    assert sorted(j.id for j in claims if j is not None) == sorted([first.id, other.id])
    assert claims[2] is None  # both are held: nothing left to claim
    assert all(j.attempts == 1 and j.status is JobStatus.RUNNING for j in claims if j is not None)


async def test_a_passed_lease_goes_to_the_next_claim_and_the_old_attempt_cannot_apply(db: Database) -> None:
    store = ExtractionJobStore()
    ws = await make(db, "jobs-b")
    async with db.tenant(ws.key) as conn:
        queued, _ = await store.enqueue(conn, ws, SCOPE, ["m1"], actor="k", request_id="")
    first = await store.claim(db, lease_seconds=60)
    assert first is not None
    assert await store.claim(db, lease_seconds=60) is None  # its lease holds
    async with db.admin() as conn:  # the worker died: its lease passes
        await conn.execute("UPDATE extraction_jobs SET lease_until = now() - interval '1 second'")
    second = await store.claim(db, lease_seconds=60)
    assert second is not None
    assert (second.id, second.attempts) == (queued.id, 2)
    async with db.tenant(ws.key) as conn:
        assert not await store.hold(conn, first)  # attempt 1 applies nothing
    async with db.tenant(ws.key) as conn:
        assert await store.hold(conn, second)
        await store.finish(conn, second, {"memory_ids": [], "operations": []})
    async with db.tenant(ws.key) as conn:
        done = await store.get(conn, ws, queued.id)
    assert done is not None
    assert done.status is JobStatus.DONE
    assert await store.seconds_to_next(db) is None


async def test_a_failed_attempt_waits_for_its_retry_then_fails_for_good(db: Database) -> None:
    store = ExtractionJobStore()
    ws = await make(db, "jobs-c")
    async with db.tenant(ws.key) as conn:
        await store.enqueue(conn, ws, SCOPE, ["m1"], actor="k", request_id="")
    job = await store.claim(db, lease_seconds=60)
    assert job is not None
    await store.fail(db, job, "LLM: timeout after 60.0 s", final=False, retry_seconds=30)
    assert await store.claim(db, lease_seconds=60) is None  # not due for 30 s
    due = await store.seconds_to_next(db)
    assert due is not None
    assert 25 < due <= 30
    await store.fail(db, job, "a stale attempt's error", final=True, retry_seconds=0)  # attempt moved on: no-op
    async with db.tenant(ws.key) as conn:
        queued = await store.get(conn, ws, job.id)
    assert queued is not None
    assert (queued.status, queued.error) == (JobStatus.QUEUED, "LLM: timeout after 60.0 s")


async def test_another_workspace_sees_no_job(db: Database) -> None:
    store = ExtractionJobStore()
    a, b = await make(db, "jobs-d"), await make(db, "jobs-e")
    async with db.tenant(a.key) as conn:
        job, _ = await store.enqueue(conn, a, SCOPE, ["m1"], actor="k", request_id="")
    async with db.tenant(b.key) as conn:
        assert await store.get(conn, b, job.id) is None
        cur = await conn.execute("SELECT count(*) FROM extraction_jobs")  # no WHERE: RLS alone hides it
        assert (await cur.fetchone() or {"count": -1})["count"] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(
                "INSERT INTO extraction_jobs (workspace_key, id, dedupe_key, session_id, message_ids, actor)"
                " VALUES (%s, gen_random_uuid(), 'x', 's', '{}', 'k')",
                (a.key,),
            )
