"""WriteConversation without an LLM: the messages appended to the session's transcript and
one EPISODIC memory per message, in one tenant transaction, at most once per request id."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memplane.domain.models import (
    ConversationMessage,
    Memory,
    MemoryType,
    NewMemory,
    Principal,
    Provenance,
    Scope,
    Workspace,
)
from memplane.domain.validation import Violations, check_batch, check_request_id, check_scope, check_text, check_time
from memplane.embedding.compat import ensure_compatible
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.quota.meter import EmbeddingMeter
from memplane.settings import LimitsSettings
from memplane.storage.database import Connection
from memplane.storage.memories import MemoryStore
from memplane.storage.transcripts import AUTO_ID_PREFIX, TranscriptStore
from memplane.writeback.requests import Ledger, WriteRequest, prepare


@dataclasses.dataclass(frozen=True)
class ConversationResult:
    """What WriteConversation stored."""

    memories: list[Memory]
    transcript_message_count: int
    method: str


def _describe_turn(message: ConversationMessage, when: datetime) -> str:
    """ "[8 May 2023] Caroline": the turn's date (UTC) and speaker, so that the indexed text
    reads "[date] speaker: text" (see `index_text`); the exact time is in metadata."""
    speaker = message.name or message.role.value
    return f"[{when.strftime('%-d %B %Y')}] {speaker}"


class ConversationWriter:
    """Writes conversations of one workspace at a time (`WriteBackService.write_conversation`)."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        memories: MemoryStore,
        transcripts: TranscriptStore,
        meter: EmbeddingMeter,
        limits: LimitsSettings,
    ) -> None:
        self._ledger = ledger
        self._memories = memories
        self._transcripts = transcripts
        self._meter = meter
        self._limits = limits

    async def write(
        self,
        principal: Principal,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ConversationMessage],
        request_id: str = "",
    ) -> ConversationResult:
        """Append *messages* to the session transcript and store one EPISODIC memory per
        message (speaker, role, message id and time in metadata; "speaker, date" as the
        description so dates are searchable). No LLM: method "episodic".

        Raises `InvalidArgumentError` (empty session_id, bad or duplicate message ids, …).
        """
        v = Violations()
        check_scope(v, "scope", scope, self._limits)
        if not scope.session_id:
            v.add("scope.session_id", "is required to write a conversation")
        check_batch(v, "messages", len(messages), self._limits)
        check_request_id(v, "request_id", request_id, self._limits)
        seen: set[str] = set()
        for i, m in enumerate(messages[: self._limits.max_batch_size]):
            check_text(v, f"messages[{i}].content", m.content, self._limits.max_content_bytes, required=True)
            check_text(v, f"messages[{i}].name", m.name, self._limits.max_id_bytes)
            check_text(v, f"messages[{i}].id", m.id, self._limits.max_id_bytes)
            check_time(v, f"messages[{i}].create_time", m.created_at)
            if m.id.startswith(AUTO_ID_PREFIX):
                v.add(
                    f"messages[{i}].id",
                    f"must not start with {AUTO_ID_PREFIX!r} (reserved for server-numbered messages)",
                )
            if m.id and m.id in seen:
                v.add(f"messages[{i}].id", f"duplicates message id {m.id!r} in this request")
            seen.add(m.id)
        v.raise_if_any()
        ensure_compatible(workspace, self._meter.embedder)
        now = datetime.now(UTC)
        items = []
        for m in messages:
            when = m.created_at or now
            metadata: dict[str, Any] = {"role": m.role.value, "turn_time": when.isoformat()}
            if m.name:
                metadata["speaker"] = m.name
            if m.id:
                metadata["message_id"] = m.id
            items.append(
                NewMemory(
                    content=m.content,
                    scope=scope,
                    type=MemoryType.EPISODIC,
                    description=_describe_turn(m, when),
                    metadata=metadata,
                    valid_from=when,
                    provenance=Provenance(session_id=scope.session_id, message_ids=(m.id,) if m.id else ()),
                )
            )
        request = WriteRequest.of(
            request_id,
            "WriteConversation",
            lambda: {"scope": dataclasses.asdict(scope), "messages": [dataclasses.asdict(m) for m in messages]},
        )
        replayed = await self._ledger.replay(workspace, request)
        if replayed is not None:
            return ConversationResult(replayed[1], int(replayed[0]["count"]), "episodic")
        prepared = await prepare(self._meter, workspace, items)

        async def work(conn: Connection) -> dict[str, Any]:
            given = [m.id for m in messages if m.id]
            clash = await self._transcripts.existing_ids(conn, workspace, scope.session_id, given) if given else []
            if clash:
                where = [i for i, m in enumerate(messages) if m.id in set(clash)]
                raise InvalidArgumentError(
                    [FieldViolation(f"messages[{i}].id", "is already in the session's transcript") for i in where]
                )
            ids = await self._transcripts.append(conn, workspace, scope, messages, now=now)
            final = [
                dataclasses.replace(
                    p,
                    memory=dataclasses.replace(
                        p.memory,
                        provenance=Provenance(scope.session_id, (mid,)),
                        metadata={**p.memory.metadata, "message_id": mid},
                    ),
                )
                for p, mid in zip(prepared, ids, strict=True)
            ]
            rows = await self._memories.insert(
                conn, workspace, final, actor=principal.actor, request_id=request_id, now=now
            )
            written.extend(rows)
            return {"ids": [m.id for m in written], "count": len(ids)}

        written: list[Memory] = []
        result, stored = await self._ledger.once(workspace, request, work, written)
        return ConversationResult(stored, int(result["count"]), "episodic")
