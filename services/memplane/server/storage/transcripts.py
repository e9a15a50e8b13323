"""Session transcripts: raw messages kept in order (ReMe's dialog/*.jsonl).

A message's `content` is its plain text (`ContextMessage.text()` for structured
messages); `blocks` (jsonb, `memplane.domain.context_json`) keeps the content blocks of
messages recorded by the compaction service and is NULL for plain-text messages written
by WriteConversation. Messages are never deleted by compaction, only marked `compacted`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memplane.domain.context import ContextMessage, TextBlock
from memplane.domain.context_json import blocks_from_json, blocks_to_json
from memplane.domain.models import ConversationMessage, MessageRole, Scope, Workspace
from memplane.server.storage.database import Connection, fetch_one

# Server-numbered message ids read "#<seq>"; client ids may not start with "#"
# (checked by the write-back service), so the two never collide.
AUTO_ID_PREFIX = "#"


@dataclass(frozen=True)
class TranscriptEntry:
    """One transcript message: its position in the session (`seq`, 1-based), the
    message (id always set; blocks from `blocks`, else one TextBlock of the content) and
    whether it was compacted out of the agent's context."""

    seq: int
    message: ContextMessage
    compacted: bool


@dataclass(frozen=True)
class _Row:
    """A message to insert (ids not yet assigned)."""

    id: str
    role: MessageRole
    name: str
    content: str
    created_at: datetime | None
    blocks: list[dict[str, Any]] | None
    compacted: bool


async def _lock_session(conn: Connection, workspace: Workspace, session_id: str) -> None:
    """Serialise writers of one session's transcript until the transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", (session_id, workspace.key))


def _entry(row: dict[str, Any]) -> TranscriptEntry:
    raw = row["blocks"]
    blocks = blocks_from_json(raw) if raw is not None else (TextBlock(row["content"]),)
    message = ContextMessage(
        role=MessageRole(row["role"]),
        blocks=blocks,
        name=row["name"],
        id=row["message_id"],
        created_at=row["created_at"],
    )
    return TranscriptEntry(seq=int(row["seq"]), message=message, compacted=bool(row["compacted"]))


class TranscriptStore:
    """Append, mark, page and erase transcript messages of one workspace partition.

    Every method takes a connection from `Database.tenant(workspace.key)` and runs in
    the caller's transaction. Writers of one session serialise on a transaction-scoped
    advisory lock keyed by (session_id, workspace), so sequence numbers and ids never
    collide."""

    async def append(
        self,
        conn: Connection,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ConversationMessage],
        *,
        now: datetime,
    ) -> list[str]:
        """Append plain-text *messages* to the session's transcript (blocks NULL); return
        their message ids (a message without an id gets "#<sequence number>")."""
        rows = [_Row(m.id, m.role, m.name, m.content, m.created_at, None, False) for m in messages]
        return await self._insert(conn, workspace, scope, rows, now=now)

    async def append_context(
        self,
        conn: Connection,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ContextMessage],
        *,
        now: datetime,
        compacted: bool = False,
    ) -> list[str]:
        """Append structured *messages* (content = `text()`, blocks as jsonb), all marked
        *compacted*; return their message ids ("#<sequence number>" for an empty id).
        The caller guarantees the non-empty ids are not in the transcript yet (the
        unique constraint would fail the transaction)."""
        rows = [
            _Row(m.id, m.role, m.name, m.text(), m.created_at, blocks_to_json(m.blocks), compacted) for m in messages
        ]
        return await self._insert(conn, workspace, scope, rows, now=now)

    async def _insert(
        self, conn: Connection, workspace: Workspace, scope: Scope, rows: Sequence[_Row], *, now: datetime
    ) -> list[str]:
        await _lock_session(conn, workspace, scope.session_id)
        if not rows:
            return []
        cur = await conn.execute(
            "SELECT coalesce(max(seq), 0) AS seq FROM transcript_messages WHERE workspace_key = %s AND session_id = %s",
            (workspace.key, scope.session_id),
        )
        row = await fetch_one(cur)
        start = int(row["seq"]) + 1
        ids = [r.id or f"{AUTO_ID_PREFIX}{start + i}" for i, r in enumerate(rows)]
        # One statement for the whole batch (a JSON array of the rows, in order), not one
        # per row: the 3,000 compacted messages of a 128k-token window are one round trip
        # and one json.dumps.
        batch = [
            {
                "message_id": ids[i],
                "role": r.role.value,
                "name": r.name,
                "content": r.content,
                "created_at": (r.created_at or now).isoformat(),
                "blocks": r.blocks,
                "compacted": r.compacted,
            }
            for i, r in enumerate(rows)
        ]
        await conn.execute(
            "INSERT INTO transcript_messages (workspace_key, session_id, seq, message_id, user_id, agent_id,"
            " role, name, content, created_at, blocks, compacted)"
            " SELECT %s, %s, %s + r.ord - 1, r.message_id, %s, %s, r.role, r.name, r.content, r.created_at,"
            " r.blocks, r.compacted"
            " FROM ROWS FROM (json_to_recordset(%s::json) AS (message_id text, role text, name text, content text,"
            " created_at timestamptz, blocks jsonb, compacted boolean))"
            " WITH ORDINALITY AS r(message_id, role, name, content, created_at, blocks, compacted, ord)",
            (
                workspace.key,
                scope.session_id,
                start,
                scope.user_id,
                scope.agent_id,
                json.dumps(batch, ensure_ascii=False),
            ),
        )
        return ids

    async def record_compacted(
        self,
        conn: Connection,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ContextMessage],
        *,
        now: datetime,
    ) -> list[str]:
        """Record that *messages* were compacted out of the agent's context (ReMe keeps
        compacted dialog on disk); return their transcript ids, in order.

        A message whose non-empty id is already in the session's transcript (written by
        WriteConversation, or recorded by an earlier compaction) is marked compacted and
        left as it was. Any other message is appended, marked compacted, with its blocks,
        content = `text()`, created_at or *now*. The service gives every message an id
        before calling this (client ids never start with "#" or "~"; id-less messages get
        content ids); defensively, an empty id or an unknown "#<n>" id (it could collide
        with a later server-numbered one) still gets a fresh "#<sequence number>". An id repeated
        within *messages* is recorded once and returned for each occurrence. Takes the
        session's append lock first, like `append`. Raises `ValueError` for an empty
        `scope.session_id`.
        """
        if not scope.session_id:
            raise ValueError("record_compacted needs scope.session_id")
        await _lock_session(conn, workspace, scope.session_id)
        given = list(dict.fromkeys(m.id for m in messages if m.id))
        cur = await conn.execute(
            "UPDATE transcript_messages SET compacted = true WHERE workspace_key = %s AND session_id = %s"
            " AND message_id = ANY(%s) RETURNING message_id",
            (workspace.key, scope.session_id, given),
        )
        existing = {r["message_id"] for r in await cur.fetchall()}
        slots: list[str | int] = []  # an id already known, or the index into `fresh`
        fresh: list[ContextMessage] = []
        fresh_by_id: dict[str, int] = {}
        for m in messages:
            if m.id in existing:
                slots.append(m.id)
            elif m.id and not m.id.startswith(AUTO_ID_PREFIX):
                if m.id not in fresh_by_id:
                    fresh_by_id[m.id] = len(fresh)
                    fresh.append(m)
                slots.append(fresh_by_id[m.id])
            else:
                slots.append(len(fresh))
                fresh.append(m if not m.id else ContextMessage(m.role, m.blocks, m.name, "", m.created_at))
        new_ids = await self.append_context(conn, workspace, scope, fresh, now=now, compacted=True)
        return [s if isinstance(s, str) else new_ids[s] for s in slots]

    async def page(
        self, conn: Connection, workspace: Workspace, session_id: str, *, after_seq: int, limit: int
    ) -> list[TranscriptEntry]:
        """Up to *limit* messages of the session with seq > *after_seq*, oldest first
        (compacted ones included and flagged). Raises `ValueError` when a stored blocks
        value is malformed (a bug: only `append_context` writes it)."""
        cur = await conn.execute(
            "SELECT seq, message_id, role, name, content, created_at, blocks, compacted FROM transcript_messages"
            " WHERE workspace_key = %s AND session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (workspace.key, session_id, after_seq, limit),
        )
        return [_entry(r) for r in await cur.fetchall()]

    async def existing_ids(
        self, conn: Connection, workspace: Workspace, session_id: str, ids: Sequence[str]
    ) -> list[str]:
        """Which of *ids* are already in the session's transcript. Takes the session's
        append lock first, so the answer still holds when `append` runs in this transaction
        (a concurrent writer of the same ids commits first and is seen here)."""
        await _lock_session(conn, workspace, session_id)
        cur = await conn.execute(
            "SELECT message_id FROM transcript_messages WHERE workspace_key = %s AND session_id = %s"
            " AND message_id = ANY(%s)",
            (workspace.key, session_id, list(ids)),
        )
        return [r["message_id"] for r in await cur.fetchall()]

    async def delete_by_scope(self, conn: Connection, workspace: Workspace, scope: Scope) -> int:
        """Delete the transcript messages whose scope matches all non-empty fields."""
        cur = await conn.execute(
            "WITH d AS (DELETE FROM transcript_messages WHERE workspace_key = %(ws)s"
            " AND (%(u)s = '' OR user_id = %(u)s) AND (%(a)s = '' OR agent_id = %(a)s)"
            " AND (%(s)s = '' OR session_id = %(s)s) RETURNING 1) SELECT count(*) AS n FROM d",
            {"ws": workspace.key, "u": scope.user_id, "a": scope.agent_id, "s": scope.session_id},
        )
        return int((await fetch_one(cur))["n"])
