"""A `memplane serve` process killed (SIGKILL) in the middle of an extraction job's
transaction leaves nothing of the job applied; started again, its worker takes the job
over once the lease has passed and applies it once.

"In the middle" is made certain, not hoped for: the model's answer is held until the
test holds the workspace's `workspace_counters` rows (FOR UPDATE, every shard) from its own connection,
so the job's transaction has locked the job and waits inside its insert of the memories
(`memplane_insert_memories`, at the counter update); the test sees that backend waiting,
kills the server, lets go of the row and waits until the orphaned backend has gone. The cluster is the fault tier's own
(`killable_postgres`), so no other server's worker can take the job."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg

from memplane.client import AsyncMemplaneClient
from memplane.server.storage.jobs import LOST_ATTEMPT
from memplane.v1 import memory_pb2, writeback_pb2
from tests.fake_llm import FakeLLM, Respond
from tests.faults.conftest import KillablePostgres, ServerProcess, wait_for_sql
from tests.fix_replica import wait_until
from tests.fix_server import random_workspace_name
from tests.support import ts

Serve = Callable[..., Awaitable[ServerProcess]]
SCOPE = memory_pb2.Scope(user_id="ana", session_id="s1")
FACTS = json.dumps(
    {
        "memories": [
            {"type": "user", "name": "Home", "description": "", "content": "Ana lives in Lisbon.", "speaker": "user"},
            {"type": "user", "name": "Diet", "description": "", "content": "Ana is vegetarian.", "speaker": "user"},
            {"type": "tool", "name": "pytest", "description": "", "content": "pytest -n 4 works.", "speaker": "user"},
        ]
    }
)


def _env(fake: FakeLLM) -> dict[str, str]:
    return {
        "MEMPLANE_LLM__BASE_URL": fake.base_url,
        "MEMPLANE_LLM__MAX_RETRIES": "0",
        "MEMPLANE_EXTRACTION__WORKERS": "1",
        "MEMPLANE_EXTRACTION__LEASE_SECONDS": "2",
    }


async def _state(dsn: str, workspace_key: int) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM memories WHERE workspace_key = %(k)s AND type <> 'episodic') AS extracted,"
            " (SELECT count(*) FROM memories WHERE workspace_key = %(k)s) AS memories,"
            " (SELECT memory_count FROM workspace_stats WHERE workspace_key = %(k)s) AS counted,"
            " (SELECT count(*) FROM memory_events WHERE workspace_key = %(k)s AND decision IS NOT NULL) AS audited,"
            " (SELECT status || '/' || attempts FROM extraction_jobs WHERE workspace_key = %(k)s) AS job",
            {"k": workspace_key},
        )
        row = await cur.fetchone()
    assert row is not None
    return dict(zip(("extracted", "memories", "counted", "audited", "job"), row, strict=True))


async def test_a_worker_killed_mid_job_applies_nothing_and_the_job_completes_after_restart(
    killable_postgres: KillablePostgres, serve: Serve, admin_key: str
) -> None:
    dsn = killable_postgres.dsn
    gate = threading.Event()

    def held(_: dict[str, Any]) -> str:
        gate.wait(60)
        return FACTS

    with FakeLLM() as fake:
        server = await serve(dsn, **_env(fake))
        name = random_workspace_name()
        async with AsyncMemplaneClient(server.target, admin_key) as admin:
            await admin.create_workspace(name)
            key = (await admin.create_api_key(name, "crash")).api_key
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            row = await (await conn.execute("SELECT key FROM workspaces WHERE name = %s", (name,))).fetchone()
        assert row is not None
        workspace_key = int(row[0])

        fake.script(Respond(held))
        message = writeback_pb2.ConversationMessage(
            id="m1", role=memory_pb2.MESSAGE_ROLE_USER, content="I live in Lisbon, I'm vegetarian; pytest -n 4 works."
        )
        message.create_time.CopyFrom(ts(datetime(2026, 11, 13, 9, 0, tzinfo=UTC)))
        async with AsyncMemplaneClient(server.target, key) as client:
            queued = await client.write_conversation(SCOPE, [message], extract=True)
        job_id = queued.extraction_job.id
        wait_until(lambda: len(fake.requests) == 1, "the worker asks the model")

        async with await psycopg.AsyncConnection.connect(dsn) as holder:
            await holder.execute(
                "SELECT 1 FROM workspace_counters WHERE workspace_key = %s FOR UPDATE", (workspace_key,)
            )
            holder_pid = holder.info.backend_pid
            gate.set()  # the model answers; the job's transaction runs into the held row
            waiting = (
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%%FROM memplane_insert_memories(%%' AND pid <> %s"
            )
            await wait_for_sql(dsn, f"SELECT EXISTS ({waiting})", (holder_pid,), "the job's transaction waits")
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                [(orphan,)] = await (await conn.execute(waiting, (holder_pid,))).fetchall()
            server.process.kill()
            await server.process.wait()
            await holder.rollback()
        gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
        await wait_for_sql(dsn, gone, (orphan,), "the killed server's backend has exited")

        # Nothing of the job applied: only the episodic turn; the job still running under attempt 1.
        assert await _state(dsn, workspace_key) == {
            "extracted": 0,
            "memories": 1,
            "counted": 1,
            "audited": 0,
            "job": "running/1",
        }

        fake.script(FACTS)  # the retry's answer
        again = await serve(dsn, **_env(fake))
        done = "SELECT EXISTS (SELECT 1 FROM extraction_jobs WHERE workspace_key = %s AND status = 'done')"
        await wait_for_sql(dsn, done, (workspace_key,), "the restarted server's worker has done the job")
        assert await _state(dsn, workspace_key) == {
            "extracted": 3,
            "memories": 4,
            "counted": 4,
            "audited": 3,
            "job": "done/2",
        }
        async with AsyncMemplaneClient(again.target, key) as client:
            job = await client.get_extraction_job(job_id)
        assert job.status == writeback_pb2.EXTRACTION_JOB_STATUS_DONE
        assert job.attempt_count == 2
        [lost] = job.failed_attempts  # the killed worker's attempt, recorded by the claim that took over
        assert (lost.attempt, lost.error) == (1, LOST_ATTEMPT)
        assert len(job.memory_ids) == 3
        assert len(fake.requests) == 2
