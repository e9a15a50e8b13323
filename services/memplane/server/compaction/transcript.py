"""The session transcript: compacted messages recorded (marked compacted, never deleted)
and read back page by page."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from memplane.domain.context import ContextMessage
from memplane.domain.models import Scope, Workspace
from memplane.server.compaction.content_ids import with_content_ids
from memplane.server.settings import LimitsSettings
from memplane.server.storage.routing import TenantDatabase
from memplane.server.storage.transcripts import TranscriptEntry, TranscriptStore
from memplane.server.validation import Violations, check_text


class SessionTranscript:
    """Records and pages the transcripts of one server's sessions."""

    def __init__(self, *, db: TenantDatabase, transcripts: TranscriptStore, limits: LimitsSettings) -> None:
        self._db = db
        self._transcripts = transcripts
        self._limits = limits

    async def record(self, workspace: Workspace, scope: Scope, messages: Sequence[ContextMessage]) -> list[str]:
        """Record compacted *messages* in the session transcript, marked compacted (one
        transaction); returns their transcript ids. Messages without an id are recorded
        under a content id (`with_content_ids`), so a retried compaction (a lost reply, a
        second PrepareContext with the same history) does not record them twice."""
        keyed = with_content_ids(messages)
        async with self._db.tenant(workspace.key) as conn:
            return await self._transcripts.record_compacted(conn, workspace, scope, keyed, now=datetime.now(UTC))

    async def page(
        self, workspace: Workspace, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[TranscriptEntry], str]:
        """One page of a session's transcript, oldest first, and the next page token
        ("" on the last page). Raises `InvalidArgumentError` (session_id, page_size,
        page_token)."""
        v = Violations()
        check_text(v, "session_id", session_id, self._limits.max_id_bytes, required=True)  # as every scope field
        if not 0 <= page_size <= self._limits.max_page_size:
            v.add("page_size", f"must be 0 to {self._limits.max_page_size}")
        after = 0
        if page_token:
            if not page_token.isascii() or not page_token.isdigit() or len(page_token) > 18:
                v.add("page_token", "is not a token this server returned")
            else:
                after = int(page_token)
        v.raise_if_any()
        size = page_size or 200
        async with self._db.tenant(workspace.key) as conn:
            entries = await self._transcripts.page(conn, workspace, session_id, after_seq=after, limit=size + 1)
        more = len(entries) > size
        entries = entries[:size]
        return entries, (str(entries[-1].seq) if more else "")
