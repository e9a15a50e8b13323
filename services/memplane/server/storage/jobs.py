"""The extraction job table (migration 0012): queue, claim, finish, fail, read.

Claims go through `Database.admin` (a worker serves every workspace), with
`FOR UPDATE SKIP LOCKED` so concurrent workers of all servers never take the same job
and never wait on each other. A claim sets a lease; `finish` runs in the caller's tenant
transaction — the one that applies the job's memory changes — and commits only if the
job is still running under the same attempt, so a job whose lease passed to another
worker is never applied twice.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from memplane.domain.extraction import ExtractionJob, FailedAttempt, JobStatus
from memplane.domain.models import ConversationMessage, MessageRole, Scope, Workspace
from memplane.server.storage.database import Connection, Database, fetch_one
from memplane.server.storage.transcripts import AUTO_ID_PREFIX

NEW_JOB_CHANNEL = "memplane_extraction"
LOST_ATTEMPT = "worker lost: its lease passed before the attempt finished"
"""The failure recorded for an attempt whose worker died (or hung) mid-job."""
DONE_JOB_CHANNEL = "memplane_extraction_done"

_CLAIM = """
WITH next AS (
    SELECT workspace_key, id FROM extraction_jobs
    WHERE ((status = 'queued' AND run_after <= now()) OR (status = 'running' AND lease_until < now()))
      AND (%(ws)s::bigint IS NULL OR (workspace_key = %(ws)s AND id = %(id)s::uuid))
    ORDER BY run_after, created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
UPDATE extraction_jobs j SET status = 'running', attempts = j.attempts + 1,
    lease_until = now() + make_interval(secs => %(lease)s), updated_at = now(),
    failed_attempts = CASE WHEN j.status = 'running'  -- taken over: the attempt before was lost
        THEN memplane_job_failure(j.failed_attempts, j.attempts, %(lost)s) ELSE j.failed_attempts END
FROM next WHERE j.workspace_key = next.workspace_key AND j.id = next.id
RETURNING j.*
"""


def dedupe_key(scope: Scope, message_ids: Sequence[str], request_id: str) -> str:
    """'messages:<sha-256 of the session id and the message ids>' when every message has
    a client id (the same messages are the same job, whatever the request id), else
    'request:<id>' with an idempotency key, else the digest of the server-numbered ids."""
    if request_id and any(i.startswith(AUTO_ID_PREFIX) for i in message_ids):
        return f"request:{request_id}"
    digest = hashlib.sha256("\x1f".join([scope.session_id, *message_ids]).encode()).hexdigest()
    return f"messages:{digest}"


def _job(row: dict[str, Any]) -> ExtractionJob:
    return ExtractionJob(
        id=str(row["id"]),
        workspace_key=int(row["workspace_key"]),
        status=JobStatus(row["status"]),
        scope=Scope(user_id=row["user_id"], agent_id=row["agent_id"], session_id=row["session_id"]),
        message_ids=tuple(row["message_ids"]),
        actor=row["actor"],
        request_id=row["request_id"],
        attempts=int(row["attempts"]),
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        result=row["result"] or {},
        failed_attempts=tuple(
            FailedAttempt(int(f["attempt"]), str(f["error"]), datetime.fromisoformat(f["time"]))
            for f in row["failed_attempts"]
        ),
    )


class ExtractionJobStore:
    """Reads and writes of `extraction_jobs`. Stateless."""

    async def enqueue(
        self,
        conn: Connection,
        workspace: Workspace,
        scope: Scope,
        message_ids: Sequence[str],
        *,
        actor: str,
        request_id: str,
    ) -> tuple[ExtractionJob, bool]:
        """Queue a job in the caller's tenant transaction; (the job, True) — or (the job
        already queued for the same dedupe key, False): a conversation written twice is
        one job."""
        key = dedupe_key(scope, message_ids, request_id)
        cur = await conn.execute(
            "INSERT INTO extraction_jobs (workspace_key, id, dedupe_key, user_id, agent_id, session_id,"
            " message_ids, actor, request_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (workspace_key, dedupe_key) DO NOTHING RETURNING *",
            (
                workspace.key,
                str(uuid.uuid4()),
                key,
                scope.user_id,
                scope.agent_id,
                scope.session_id,
                list(message_ids),
                actor,
                request_id,
            ),
        )
        row = await cur.fetchone()
        if row is not None:
            return _job(row), True
        cur = await conn.execute(
            "SELECT * FROM extraction_jobs WHERE workspace_key = %s AND dedupe_key = %s", (workspace.key, key)
        )
        return _job(await fetch_one(cur)), False

    async def get(self, conn: Connection, workspace: Workspace, job_id: str) -> ExtractionJob | None:
        """One job of the workspace, or None."""
        cur = await conn.execute(
            "SELECT * FROM extraction_jobs WHERE workspace_key = %s AND id = %s", (workspace.key, job_id)
        )
        row = await cur.fetchone()
        return _job(row) if row is not None else None

    async def page(
        self,
        conn: Connection,
        workspace: Workspace,
        *,
        statuses: Sequence[JobStatus],
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> list[ExtractionJob]:
        """At most *limit* jobs of the workspace, newest first (created_at, then id), in
        *statuses* (empty: any), after the (created_at, id) position *after* (None: from
        the newest)."""
        cur = await conn.execute(
            "SELECT * FROM extraction_jobs WHERE workspace_key = %(ws)s"
            " AND (cardinality(%(st)s::text[]) = 0 OR status = ANY(%(st)s::text[]))"
            " AND (%(at)s::timestamptz IS NULL OR (created_at, id) < (%(at)s::timestamptz, %(id)s::uuid))"
            " ORDER BY created_at DESC, id DESC LIMIT %(n)s",
            {
                "ws": workspace.key,
                "st": [str(s) for s in statuses],
                "at": after[0] if after else None,
                "id": after[1] if after else None,
                "n": limit,
            },
        )
        return [_job(row) for row in await cur.fetchall()]

    async def claim(
        self, db: Database, *, lease_seconds: float, workspace_key: int | None = None, job_id: str = ""
    ) -> ExtractionJob | None:
        """Take the next due job (queued and due, or running with its lease passed) — or
        only job *job_id* of *workspace_key* — for *lease_seconds*: status running,
        attempts + 1 (a job taken over from a lost worker records that attempt's
        failure, `LOST_ATTEMPT`). None when there is none free."""
        async with db.admin() as conn:
            cur = await conn.execute(
                _CLAIM, {"ws": workspace_key, "id": job_id or None, "lease": lease_seconds, "lost": LOST_ATTEMPT}
            )
            row = await cur.fetchone()
        return _job(row) if row is not None else None

    async def seconds_to_next(self, db: Database) -> float | None:
        """Seconds until the earliest queued job is due or running lease passes (<= 0: due
        now); None when no job waits."""
        async with db.admin() as conn:
            cur = await conn.execute(
                "SELECT extract(epoch FROM min(CASE WHEN status = 'queued' THEN run_after ELSE lease_until END)"
                " - now())::float8 AS s FROM extraction_jobs WHERE status IN ('queued', 'running')"
            )
            row = await fetch_one(cur)
        return None if row["s"] is None else float(row["s"])

    async def hold(self, conn: Connection, job: ExtractionJob) -> bool:
        """In the caller's tenant transaction, wait for the workspace's other jobs'
        transactions (a transaction-level advisory lock per workspace: two jobs never
        interleave their writes, so they cannot deadlock on each other's lexeme counters
        and stats row), then lock *job* if it is still running under this attempt (its
        lease not taken over); False otherwise (apply nothing)."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('memplane-extraction:' || %s::text, 0))",
            (job.workspace_key,),
        )
        cur = await conn.execute(
            "SELECT 1 FROM extraction_jobs WHERE workspace_key = %s AND id = %s AND status = 'running'"
            " AND attempts = %s FOR UPDATE",
            (job.workspace_key, job.id, job.attempts),
        )
        return await cur.fetchone() is not None

    async def finish(self, conn: Connection, job: ExtractionJob, result: dict[str, Any]) -> None:
        """Mark *job* (held by `hold` in this transaction) done with *result*."""
        await conn.execute(
            "UPDATE extraction_jobs SET status = 'done', result = %s, error = '', lease_until = NULL,"
            " updated_at = now() WHERE workspace_key = %s AND id = %s",
            (Jsonb(result), job.workspace_key, job.id),
        )

    async def fail(
        self,
        db: Database,
        job: ExtractionJob,
        error: str,
        *,
        final: bool,
        retry_seconds: float,
        attempted: bool = True,
    ) -> None:
        """Record *error* on this attempt of *job* (in `error`, and in `failed_attempts`
        when the attempt ran: *attempted*): failed when *final*, else queued again after
        *retry_seconds*. A no-op when the job has moved on (another attempt)."""
        async with db.admin() as conn:
            await conn.execute(
                "UPDATE extraction_jobs SET status = %(status)s, error = %(error)s, lease_until = NULL,"
                " run_after = now() + make_interval(secs => %(retry)s), updated_at = now(),"
                " failed_attempts = CASE WHEN %(attempted)s"
                "  THEN memplane_job_failure(failed_attempts, attempts, %(error)s) ELSE failed_attempts END"
                " WHERE workspace_key = %(ws)s AND id = %(id)s AND status = 'running' AND attempts = %(attempts)s",
                {
                    "status": "failed" if final else "queued",
                    "error": error,
                    "retry": retry_seconds,
                    "ws": job.workspace_key,
                    "id": job.id,
                    "attempts": job.attempts,
                    "attempted": attempted,
                },
            )

    async def messages(self, conn: Connection, job: ExtractionJob) -> list[ConversationMessage]:
        """The transcript messages of *job*, in transcript order (those erased since are absent)."""
        cur = await conn.execute(
            "SELECT message_id, role, name, content, created_at FROM transcript_messages"
            " WHERE workspace_key = %s AND session_id = %s AND message_id = ANY(%s) ORDER BY seq",
            (job.workspace_key, job.scope.session_id, list(job.message_ids)),
        )
        return [
            ConversationMessage(
                content=r["content"],
                role=MessageRole(r["role"]),
                id=r["message_id"],
                name=r["name"],
                created_at=r["created_at"],
            )
            for r in await cur.fetchall()
        ]
