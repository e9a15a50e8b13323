"""Stored tool outputs (ReMe's tool_result/ folder): table `tool_result_blobs`.

CompactToolResults stores the whole text of every tool output it cuts and hands back a
reference; ReadToolResult reads it until it expires. Rows are short-lived (days) and
immutable except for `expires_at`, which `put` extends when the same output is stored
again (deduplication by SHA-256 digest, migration 0004); `BlobCleaner` deletes expired
ones in the background, and deleting a workspace deletes its blobs (foreign key ON
DELETE CASCADE). Their bytes count against the workspace's `max_bytes` quota with its
memory text, kept in `workspace_blob_bytes` by triggers on every insert and delete
(migration 0017).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from memplane.domain.blobs import StoredBlob, count_lines, utf8_size
from memplane.domain.models import Scope, Workspace
from memplane.server.storage.database import Connection, Database, fetch_one
from memplane.server.storage.sweeper import Sweeper

# Retention bounds of put(), in seconds. At least 1 s: expiry times are kept to the whole
# second (and the marker shows them so). At most 365 days: blobs are meant to live for
# days (they hold whole tool outputs, possibly personal data, of a running agent), and a
# bound keeps a typo from pinning megabytes for decades (and keeps datetime arithmetic
# far from its year-9999 limit).
MIN_RETENTION_SECONDS = 1
MAX_RETENTION_SECONDS = 365 * 24 * 3600
MIN_RETENTION = timedelta(seconds=MIN_RETENTION_SECONDS)

# Second key of a workspace's blob lock, pg_advisory_xact_lock(memplane_event_lock_key(ws),
# 65): past the read-token slots 0..63 and the quota lock 64 (migration 0014).
BLOB_LOCK_SLOT = 65
MAX_RETENTION = timedelta(seconds=MAX_RETENTION_SECONDS)

# The one spelling of a blob reference: a UUID in canonical lower-case 8-4-4-4-12 form
# (what put() returns and the marker shows).
_REF_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _blob(row: dict[str, Any], content: str | None = None) -> StoredBlob:
    """The StoredBlob of a row (its `content` column unless *content* is given:
    `put` already holds it and need not read megabytes back)."""
    return StoredBlob(
        ref=str(row["id"]),
        content=row["content"] if content is None else content,
        byte_size=int(row["byte_size"]),
        line_count=int(row["line_count"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        tool_use_id=row["tool_use_id"],
        tool_name=row["tool_name"],
        session_id=row["session_id"],
    )


def parse_ref(ref: str) -> uuid.UUID | None:
    """The UUID of a blob reference, or None unless *ref* is a UUID in canonical
    lower-case 8-4-4-4-12 form (no braces, no "urn:uuid:", no upper case): a blob has
    exactly one reference string, so refs can be compared as strings (the marker's ref,
    a client's cache key, logs)."""
    if not isinstance(ref, str) or _REF_RE.fullmatch(ref) is None:
        return None
    return uuid.UUID(ref)


def content_digest(content: str) -> bytes:
    """SHA-256 (32 bytes) of the UTF-8 encoding of *content*: the `content_sha256` column,
    equal to PostgreSQL's `sha256(convert_to(content, 'UTF8'))` (migration 0004)."""
    return hashlib.sha256(content.encode("utf-8")).digest()


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
        blob with its `ref` (a UUID in canonical lower-case form).

        Deduplicated: when *workspace* already holds an unexpired blob (`expires_at >
        now`) with the same content (SHA-256 of its UTF-8 bytes) and the same scope
        (user_id, agent_id and session_id all equal), that blob is returned instead of a
        new one, its `expires_at` extended to max(its expiry, now + retention) so the
        returned expiry holds; its `created_at`, `tool_use_id` and `tool_name` stay
        those of the first put (same content is the same blob, whatever call produced
        it). The scope is part of the key so that erasing one user / agent / session
        (`delete_by_scope`) never deletes or keeps another's data. So an agent that
        re-sends its uncut history every turn gets the same ref back, not a new
        multi-MB row per call.

        Race-safe: the workspace's blob lock (a transaction-scoped advisory lock, key
        (workspace, BLOB_LOCK_SLOT)) is taken in *conn*'s transaction before anything
        else, so concurrent puts of one workspace are serialised until the holder's
        transaction ends: identical puts store one row (the second finds the first's),
        and the byte count and quota check that follow stay in one lock order
        (migration 0017), whatever order a transaction puts several blobs in.

        Counted in the workspace's `max_bytes` quota with its memory text (migration
        0017's triggers): an insert that would pass it raises `QuotaExceededError`
        (through `Database.tenant`; the caller's transaction then rolls back, nothing
        stored). Before counting, the workspace's expired blobs are erased (rows another
        transaction holds are left to the cleaner), so an expired blob's bytes never
        refuse a new one.

        `byte_size` is the UTF-8 size in bytes, `line_count` the "\\n"-separated lines
        (`memplane.domain.blobs.count_lines`). `expires_at` is now + retention rounded
        down to the whole second, so the marker of a cut output (which shows it to the
        second) states it exactly. Raises `ValueError` for a retention under
        `MIN_RETENTION_SECONDS` (1 s) or over `MAX_RETENTION_SECONDS` (365 days), a naive
        *now*, or NUL characters in *content* (PostgreSQL text refuses them; the service
        validates or replaces them first).
        """
        if retention < MIN_RETENTION:
            raise ValueError(f"retention must be at least {MIN_RETENTION_SECONDS} s, got {retention}")
        if retention > MAX_RETENTION:
            raise ValueError(f"retention must be at most {MAX_RETENTION_SECONDS} s (365 days), got {retention}")
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware UTC")
        if "\x00" in content:
            raise ValueError("content must not contain NUL characters")
        expires_at = (now + retention).astimezone(UTC).replace(microsecond=0)
        digest = content_digest(content)
        await conn.execute(
            "SELECT pg_advisory_xact_lock(memplane_event_lock_key(%s), %s)", (workspace.key, BLOB_LOCK_SLOT)
        )
        await conn.execute(
            "DELETE FROM tool_result_blobs WHERE (workspace_key, id) IN (SELECT workspace_key, id FROM"
            " tool_result_blobs WHERE workspace_key = %(ws)s AND expires_at <= %(now)s FOR UPDATE SKIP LOCKED)",
            {"ws": workspace.key, "now": now},
        )
        cur = await conn.execute(
            "WITH hit AS (SELECT workspace_key, id FROM tool_result_blobs WHERE workspace_key = %(ws)s"
            " AND content_sha256 = %(digest)s AND user_id = %(u)s AND agent_id = %(a)s AND session_id = %(s)s"
            " AND expires_at > %(now)s ORDER BY expires_at DESC, id LIMIT 1 FOR UPDATE)"
            " UPDATE tool_result_blobs b SET expires_at = greatest(b.expires_at, %(until)s) FROM hit"
            " WHERE b.workspace_key = hit.workspace_key AND b.id = hit.id"
            " RETURNING b.id, b.byte_size, b.line_count, b.created_at, b.expires_at, b.tool_use_id, b.tool_name,"
            " b.session_id",
            {
                "ws": workspace.key,
                "digest": digest,
                "u": scope.user_id,
                "a": scope.agent_id,
                "s": scope.session_id,
                "now": now,
                "until": expires_at,
            },
        )
        row = await cur.fetchone()
        if row is not None:
            return _blob(row, content)
        cur = await conn.execute(
            "INSERT INTO tool_result_blobs (workspace_key, id, session_id, user_id, agent_id, tool_use_id, tool_name,"
            " content, content_sha256, byte_size, line_count, created_at, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id, byte_size, line_count,"
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
                digest,
                utf8_size(content),
                count_lines(content),
                now,
                expires_at,
            ),
        )
        return _blob(await fetch_one(cur), content)

    async def get(self, conn: Connection, workspace: Workspace, ref: str, *, now: datetime) -> StoredBlob | None:
        """The blob *ref* of *workspace*, or None when the ref is not a UUID in canonical
        lower-case 8-4-4-4-12 form (`parse_ref`), unknown, another workspace's (the WHERE
        clause and row-level security both exclude it) or expired (`expires_at <= now`,
        even before the cleaner removed it)."""
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

    async def verify(
        self, conn: Connection, workspace: Workspace, ref: str, head: str, *, now: datetime
    ) -> datetime | None:
        """The expiry of blob *ref* when a tool output that claims to be cut really is one
        of ours: *ref* names an unexpired blob of *workspace* (as `get`) and *head* — the
        kept text before the marker (`tool_output.claimed_cut`) — is a prefix of its
        content. Else None: the "marker" was forged or produced by the tool itself, names
        another workspace's blob (a sub-agent's output passed on), an expired or erased
        one, or the head is not the start of that blob. The caller then treats the whole
        output, marker text included, as new (store and cut it), so no byte of it is lost.
        The prefix is compared in PostgreSQL: the content (often MBs) is not fetched."""
        key = parse_ref(ref)
        if key is None:
            return None
        cur = await conn.execute(
            "SELECT expires_at FROM tool_result_blobs WHERE workspace_key = %s AND id = %s AND expires_at > %s"
            " AND left(content, %s) = %s",
            (workspace.key, key, now, len(head), head),
        )
        row = await cur.fetchone()
        return None if row is None else row["expires_at"]

    async def extend(self, conn: Connection, workspace: Workspace, ref: str, expires_at: datetime) -> datetime:
        """Keep blob *ref* at least until *expires_at* (never shortens it); return its
        expiry. An unknown ref of this workspace is left alone and *expires_at* returned."""
        cur = await conn.execute(
            "UPDATE tool_result_blobs SET expires_at = greatest(expires_at, %s)"
            " WHERE workspace_key = %s AND id = %s RETURNING expires_at",
            (expires_at, workspace.key, ref),
        )
        row = await cur.fetchone()
        return row["expires_at"] if row is not None else expires_at

    async def delete_by_scope(self, conn: Connection, workspace: Workspace, scope: Scope) -> int:
        """Delete the blobs whose scope matches all non-empty fields of *scope* (erasure
        of a user / agent / session); return how many. Raises `ValueError` on an empty
        scope (it would erase the workspace's blobs)."""
        if scope.is_empty():
            raise ValueError("delete_by_scope needs a non-empty scope")
        cur = await conn.execute(
            "WITH d AS (DELETE FROM tool_result_blobs WHERE workspace_key = %(ws)s"
            " AND (%(u)s = '' OR user_id = %(u)s) AND (%(a)s = '' OR agent_id = %(a)s)"
            " AND (%(s)s = '' OR session_id = %(s)s) RETURNING 1) SELECT count(*) AS n FROM d",
            {"ws": workspace.key, "u": scope.user_id, "a": scope.agent_id, "s": scope.session_id},
        )
        return int((await fetch_one(cur))["n"])  # fetched, not rowcount: callers may pipeline

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


class BlobCleaner(Sweeper):
    """Deletes expired tool-result blobs in the background: `ToolResultBlobStore.delete_expired`
    with the wall clock as `now`, every *interval_seconds* (the server passes
    `compaction.blob_cleanup_interval_seconds`, default 1 h). Expired blobs are already
    invisible to `get`, so a late cleaner only costs disk."""

    def __init__(
        self,
        store: ToolResultBlobStore,
        db: Database,
        *,
        interval_seconds: float = 3600.0,
        first_delay_seconds: float = 1.0,
        batch_size: int = 1000,
    ) -> None:
        async def sweep() -> int:
            return await store.delete_expired(db, now=datetime.now(UTC), batch_size=batch_size)

        super().__init__(
            "expired tool-result blobs",
            sweep,
            interval_seconds=interval_seconds,
            first_delay_seconds=first_delay_seconds,
        )
