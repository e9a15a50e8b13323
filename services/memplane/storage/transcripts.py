"""Session transcripts: raw messages kept in order (ReMe's dialog/*.jsonl)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memplane.domain.models import ConversationMessage, Scope, Workspace
from memplane.storage.database import Connection, fetch_one

# Server-numbered message ids read "#<seq>"; client ids may not start with "#"
# (checked by the write-back service), so the two never collide.
AUTO_ID_PREFIX = "#"


class TranscriptStore:
    """Append and erase transcript messages of one workspace partition."""

    async def append(
        self,
        conn: Connection,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ConversationMessage],
        *,
        now: datetime,
    ) -> list[str]:
        """Append *messages* to the session's transcript; return their message ids
        (a message without an id gets "#<sequence number>"). Serialised per session
        by a transaction-scoped advisory lock, so concurrent writers never collide."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", (scope.session_id, workspace.key))
        cur = await conn.execute(
            "SELECT coalesce(max(seq), 0) AS seq FROM transcript_messages WHERE workspace_key = %s AND session_id = %s",
            (workspace.key, scope.session_id),
        )
        row = await fetch_one(cur)
        start = int(row["seq"]) + 1
        ids = [m.id or f"{AUTO_ID_PREFIX}{start + i}" for i, m in enumerate(messages)]
        async with conn.cursor() as c:
            await c.executemany(
                "INSERT INTO transcript_messages (workspace_key, session_id, seq, message_id, user_id, agent_id,"
                " role, name, content, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        workspace.key,
                        scope.session_id,
                        start + i,
                        ids[i],
                        scope.user_id,
                        scope.agent_id,
                        m.role.value,
                        m.name,
                        m.content,
                        m.created_at or now,
                    )
                    for i, m in enumerate(messages)
                ],
            )
        return ids

    async def existing_ids(
        self, conn: Connection, workspace: Workspace, session_id: str, ids: Sequence[str]
    ) -> list[str]:
        """Which of *ids* are already in the session's transcript. Takes the session's
        append lock first, so the answer still holds when `append` runs in this transaction
        (a concurrent writer of the same ids commits first and is seen here)."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", (session_id, workspace.key))
        cur = await conn.execute(
            "SELECT message_id FROM transcript_messages WHERE workspace_key = %s AND session_id = %s"
            " AND message_id = ANY(%s)",
            (workspace.key, session_id, list(ids)),
        )
        return [r["message_id"] for r in await cur.fetchall()]

    async def delete_by_scope(self, conn: Connection, workspace: Workspace, scope: Scope) -> int:
        """Delete the transcript messages whose scope matches all non-empty fields."""
        cur = await conn.execute(
            "DELETE FROM transcript_messages WHERE workspace_key = %(ws)s"
            " AND (%(u)s = '' OR user_id = %(u)s) AND (%(a)s = '' OR agent_id = %(a)s)"
            " AND (%(s)s = '' OR session_id = %(s)s)",
            {"ws": workspace.key, "u": scope.user_id, "a": scope.agent_id, "s": scope.session_id},
        )
        return cur.rowcount
