"""Stored tool outputs (ReMe's tool_result/ folder): table `tool_result_blobs`.

CompactToolResults stores the whole text of every tool output it cuts and hands back a
reference; ReadToolResult reads it until it expires. Rows are immutable and short-lived
(days); `BlobCleaner` deletes expired ones in the background, and deleting a workspace
deletes its blobs (foreign key ON DELETE CASCADE).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memplane.domain.blobs import StoredBlob, count_lines, utf8_size
from memplane.domain.models import Scope, Workspace
from memplane.storage.database import Connection, Database, fetch_one

_log = logging.getLogger(__name__)

# Shortest retention put() accepts: expiry times are kept to the whole second.
MIN_RETENTION = timedelta(seconds=1)


def _blob(row: dict[str, Any]) -> StoredBlob:
    return StoredBlob(
        ref=str(row["id"]),
        content=row["content"],
        byte_size=int(row["byte_size"]),
        line_count=int(row["line_count"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        tool_use_id=row["tool_use_id"],
        tool_name=row["tool_name"],
        session_id=row["session_id"],
    )


def parse_ref(ref: str) -> uuid.UUID | None:
    """The UUID of a blob reference, or None when *ref* is not a UUID."""
    try:
        return uuid.UUID(ref)
    except (ValueError, TypeError, AttributeError):
        return None


class ToolResultBlobStore:
    """Reads and writes of `tool_result_blobs`. Stateless; `put` / `get` /
    `delete_by_scope` take a connection from `Database.tenant(workspace.key)` and run in
    the caller's transaction (under row-level security); `delete_expired` opens its own
    admin transactions because it crosses workspaces."""

    async def put(
        self,
        conn: Connection,
        workspace: Workspace,
        *,
        content: str,
        scope: Scope,
        tool_use_id: str,
        tool_name: str,
        retention: timedelta,
        now: datetime,
    ) -> StoredBlob:
        """Store *content* (a whole tool output) for *retention* from *now*; return the
        blob with its new `ref` (a random UUID).

        `byte_size` is the UTF-8 size in bytes, `line_count` the "\\n"-separated lines
        (`memplane.domain.blobs.count_lines`). `expires_at` is now + retention rounded
        down to the whole second, so the marker of a cut output (which shows it to the
        second) states it exactly. Raises `ValueError` for a retention under 1 s, a naive
        *now*, or NUL characters in *content* (PostgreSQL text refuses them; the service
        validates or replaces them first).
        """
        if retention < MIN_RETENTION:
            raise ValueError(f"retention must be at least {MIN_RETENTION.total_seconds():.0f} s, got {retention}")
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware UTC")
        if "\x00" in content:
            raise ValueError("content must not contain NUL characters")
        expires_at = (now + retention).astimezone(UTC).replace(microsecond=0)
        cur = await conn.execute(
            "INSERT INTO tool_result_blobs (workspace_key, id, session_id, user_id, agent_id, tool_use_id, tool_name,"
            " content, byte_size, line_count, created_at, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id, content, byte_size, line_count,"
            " created_at, expires_at, tool_use_id, tool_name, session_id",
            (
                workspace.key,
                uuid.uuid4(),
                scope.session_id,
                scope.user_id,
                scope.agent_id,
                tool_use_id,
                tool_name,
                content,
                utf8_size(content),
                count_lines(content),
                now,
                expires_at,
            ),
        )
        return _blob(await fetch_one(cur))

    async def get(self, conn: Connection, workspace: Workspace, ref: str, *, now: datetime) -> StoredBlob | None:
        """The blob *ref* of *workspace*, or None when the ref is not a UUID, unknown,
        another workspace's (the WHERE clause and row-level security both exclude it) or
        expired (`expires_at <= now`, even before the cleaner removed it)."""
        key = parse_ref(ref)
        if key is None:
            return None
        cur = await conn.execute(
            "SELECT id, content, byte_size, line_count, created_at, expires_at, tool_use_id, tool_name, session_id"
            " FROM tool_result_blobs WHERE workspace_key = %s AND id = %s AND expires_at > %s",
            (workspace.key, key, now),
        )
        row = await cur.fetchone()
        return None if row is None else _blob(row)

    async def delete_by_scope(self, conn: Connection, workspace: Workspace, scope: Scope) -> int:
        """Delete the blobs whose scope matches all non-empty fields of *scope* (erasure
        of a user / agent / session); return how many. Raises `ValueError` on an empty
        scope (it would erase the workspace's blobs)."""
        if scope.is_empty():
            raise ValueError("delete_by_scope needs a non-empty scope")
        cur = await conn.execute(
            "DELETE FROM tool_result_blobs WHERE workspace_key = %(ws)s"
            " AND (%(u)s = '' OR user_id = %(u)s) AND (%(a)s = '' OR agent_id = %(a)s)"
            " AND (%(s)s = '' OR session_id = %(s)s)",
            {"ws": workspace.key, "u": scope.user_id, "a": scope.agent_id, "s": scope.session_id},
        )
        return cur.rowcount

    async def delete_expired(self, db: Database, *, now: datetime, batch_size: int = 1000) -> int:
        """Delete the blobs of every workspace with `expires_at <= now`, *batch_size* rows
        per admin transaction (short locks, bounded WAL per commit), oldest expiry first;
        return how many were deleted. Rows locked by a concurrent cleaner (another
        replica) are skipped, not waited for. Raises `ValueError` for a batch size < 1;
        database errors propagate (`memplane.errors.UnavailableError` and friends)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        deleted = 0
        while True:
            async with db.admin() as conn:
                cur = await conn.execute(
                    "WITH doomed AS (SELECT workspace_key, id FROM tool_result_blobs WHERE expires_at <= %s"
                    " ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)"
                    " DELETE FROM tool_result_blobs b USING doomed d"
                    " WHERE b.workspace_key = d.workspace_key AND b.id = d.id",
                    (now, batch_size),
                )
                count = cur.rowcount
            deleted += count
            if count < batch_size:
                return deleted


@dataclass
class _CleanerStats:
    runs: int = 0
    deleted: int = 0
    failures: int = 0


class BlobCleaner:
    """Deletes expired tool-result blobs in the background.

    `start()` launches an asyncio task on the running loop that calls
    `ToolResultBlobStore.delete_expired` after *first_delay_seconds* (default 1 s) and then
    every *interval_seconds* (default 10 min), with the wall clock as `now`. It logs
    counts, never content, and survives errors (logged; the next run retries). `await
    stop()` cancels it and waits; both are idempotent. Expired blobs are already
    invisible to `get`, so a late cleaner only costs disk.
    """

    def __init__(
        self,
        store: ToolResultBlobStore,
        db: Database,
        *,
        interval_seconds: float = 10 * 60.0,
        first_delay_seconds: float = 1.0,
        batch_size: int = 1000,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be > 0, got {interval_seconds}")
        self._db = db
        self._store = store
        self._interval = interval_seconds
        self._first_delay = max(0.0, min(first_delay_seconds, interval_seconds))
        self._batch_size = batch_size
        self._task: asyncio.Task[None] | None = None
        self.stats = _CleanerStats()

    @property
    def running(self) -> bool:
        """Whether the background task is alive."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the background task (no-op when running). Needs a running event loop."""
        if self.running:
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="memplane-blob-cleaner")

    async def stop(self) -> None:
        """Cancel the background task and wait for it to end."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def run_once(self) -> int:
        """One cleaning pass now; return the number of blobs deleted. Errors propagate."""
        return await self._store.delete_expired(self._db, now=datetime.now(UTC), batch_size=self._batch_size)

    async def _run(self) -> None:
        await asyncio.sleep(self._first_delay)
        while True:
            started = asyncio.get_running_loop().time()
            try:
                deleted = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # any failure: log it, keep the loop alive
                self.stats.failures += 1
                _log.exception("tool-result blob cleanup failed; retrying in %.1f s", self._interval)
            else:
                self.stats.runs += 1
                self.stats.deleted += deleted
                elapsed = asyncio.get_running_loop().time() - started
                if deleted:
                    _log.info("deleted %d expired tool-result blobs in %.3f s", deleted, elapsed)
                else:
                    _log.debug("no expired tool-result blobs (%.3f s)", elapsed)
            await asyncio.sleep(self._interval)
