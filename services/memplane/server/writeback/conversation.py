"""WriteConversation: the messages appended to the session's transcript and one EPISODIC
memory per message, in one tenant transaction, at most once per request id; with
extraction, an extraction job queued in that transaction (`memplane.server.writeback.jobs`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memplane.domain.extraction import ExtractionJob, JobStatus
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
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.embedding.compat import ensure_compatible
from memplane.server.quota.meter import EmbeddingMeter
from memplane.server.settings import LimitsSettings
from memplane.server.storage.database import Connection
from memplane.server.storage.jobs import ExtractionJobStore
from memplane.server.storage.memories import MemoryStore
from memplane.server.storage.routing import TenantDatabase
from memplane.server.storage.transcripts import AUTO_ID_PREFIX, TranscriptStore
from memplane.server.validation import Violations, check_batch, check_request_id, check_scope, check_text, check_time
from memplane.server.writeback.jobs import ExtractionRunner
from memplane.server.writeback.requests import Ledger, WriteRequest, prepare
from memplane.server.writeback.rules_writer import RULES_METHOD, rule_memories
from memplane.server.writeback.rules_writer import reconcile as reconcile_rules


@dataclasses.dataclass(frozen=True)
class ConversationResult:
    """What WriteConversation stored: the episodic memories, the messages appended, the
    method; with extraction, its job (as it is when the reply is sent) and, once the job
    is done, the memories it added or changed (`extracted`)."""

    memories: list[Memory]
    transcript_message_count: int
    method: str
    job: ExtractionJob | None = None
    extracted: list[Memory] = dataclasses.field(default_factory=list)


def _describe_turn(message: ConversationMessage, when: datetime) -> str:
    """ "[8 May 2023] Caroline": the turn's date (UTC) and speaker, so that the indexed text
    reads "[date] speaker: text" (see `index_text`); the exact time is in metadata."""
    speaker = message.name or message.role.value
    return f"[{when.strftime('%-d %B %Y')}] {speaker}"


def check_conversation(
    scope: Scope, messages: Sequence[ConversationMessage], request_id: str, limits: LimitsSettings
) -> None:
    """Raise one `InvalidArgumentError` naming every bad field of a WriteConversation."""
    v = Violations()
    check_scope(v, "scope", scope, limits)
    if not scope.session_id:
        v.add("scope.session_id", "is required to write a conversation")
    check_batch(v, "messages", len(messages), limits)
    check_request_id(v, "request_id", request_id, limits)
    seen: set[str] = set()
    for i, m in enumerate(messages[: limits.max_batch_size]):
        check_text(v, f"messages[{i}].content", m.content, limits.max_content_bytes, required=True)
        check_text(v, f"messages[{i}].name", m.name, limits.max_id_bytes)
        check_text(v, f"messages[{i}].id", m.id, limits.max_id_bytes)
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


def _episodic(scope: Scope, m: ConversationMessage, now: datetime) -> NewMemory:
    """The EPISODIC memory of one turn (speaker, role, message id and time in metadata;
    UpdateMemory keeps them: `memplane.server.writeback.turns`)."""
    when = m.created_at or now
    metadata: dict[str, Any] = {"role": m.role.value, "turn_time": when.isoformat()}
    if m.name:
        metadata["speaker"] = m.name
    if m.id:
        metadata["message_id"] = m.id
    return NewMemory(
        content=m.content,
        scope=scope,
        type=MemoryType.EPISODIC,
        description=_describe_turn(m, when),
        metadata=metadata,
        valid_from=when,
        provenance=Provenance(session_id=scope.session_id, message_ids=(m.id,) if m.id else ()),
    )


class ConversationWriter:
    """Writes conversations of one workspace at a time (WriteConversation, called by the gRPC edge)."""

    def __init__(
        self,
        *,
        db: TenantDatabase,
        ledger: Ledger,
        memories: MemoryStore,
        transcripts: TranscriptStore,
        meter: EmbeddingMeter,
        limits: LimitsSettings,
        jobs: ExtractionJobStore,
        extraction: ExtractionRunner | None,
        wait_seconds: float,
    ) -> None:
        """*jobs* and *extraction* (the job table and this process's runner) serve
        `write(extract=True)`; *wait_seconds* bounds its `wait`."""
        self._db = db
        self._jobs = jobs
        self._extraction = extraction
        self._wait_seconds = wait_seconds
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
        *,
        extract: bool = False,
        wait: bool = False,
        skip_episodic: bool = False,
    ) -> ConversationResult:
        """Append *messages* to the session transcript and store one EPISODIC memory per
        message (speaker, role, message id and time in metadata; "speaker, date" as the
        description so dates are searchable): method "episodic".

        With *extract* (and an LLM configured), an extraction job over these messages is
        queued in the same transaction (method "episodic+llm"; `memplane.server.writeback.jobs`);
        with *wait* too, the reply waits for it (run in this call when no worker holds
        it) up to `extraction.wait_timeout`. The same messages written again (all their
        ids already in the transcript) store nothing new and return the first write's
        job. Without an LLM, the user's first-person statements and instructions are
        extracted by fixed patterns in this transaction
        (`memplane.server.writeback.rules_writer`; method `RULES_METHOD`) and returned as
        `extracted`.

        With *skip_episodic* (and *extract*) the messages go to the transcript only: no
        EPISODIC memory is stored, the memories are only what extraction makes (method
        without "episodic+"), so a raw turn, an acknowledgement or an assistant's filler
        never becomes a memory (mem0's add(infer=True)).

        Raises `InvalidArgumentError` (empty session_id, bad or duplicate message ids,
        *skip_episodic* without *extract*, …).
        """
        check_conversation(scope, messages, request_id, self._limits)
        if skip_episodic and not extract:
            raise InvalidArgumentError([FieldViolation("skip_episodic", "needs extract")])
        ensure_compatible(workspace, self._meter.embedder)
        now = datetime.now(UTC)
        items = [] if skip_episodic else [_episodic(scope, m, now) for m in messages]
        asked = extract
        extract = asked and self._extraction is not None and self._extraction.configured
        method = "episodic+llm" if extract else "episodic"
        rules = rule_memories(scope, messages, now) if asked and not extract else []
        if asked and not extract:
            method = RULES_METHOD
        if skip_episodic:
            method = method.removeprefix("episodic+")

        def body() -> dict[str, Any]:
            content: dict[str, Any] = {
                "scope": dataclasses.asdict(scope),
                "messages": [dataclasses.asdict(m) for m in messages],
            }
            if asked:  # absent otherwise: the digests of requests without it are unchanged
                content["extract"] = True
            if skip_episodic:
                content["skip_episodic"] = True
            return content

        request = WriteRequest.of(request_id, "WriteConversation", body)
        replayed = await self._ledger.replay(workspace, request)
        if replayed is not None:
            first, kept = replayed
            if rules:
                return await self._with_rules(workspace, kept, int(first["count"]), first.get("rule_ids", []), method)
            return await self._result(workspace, kept, int(first["count"]), method, first.get("job_id"), wait=wait)
        prepared = await prepare(self._meter, workspace, [*items, *(r.memory for r in rules)])
        prepared, prepared_rules = prepared[: len(items)], prepared[len(items) :]

        async def work(conn: Connection) -> dict[str, Any]:
            given = [m.id for m in messages if m.id]
            clash = await self._transcripts.existing_ids(conn, workspace, scope.session_id, given) if given else []
            if extract and clash and len(clash) == len(messages):  # the same messages again: their first job
                job, _ = await self._jobs.enqueue(conn, workspace, scope, given, actor=principal.actor, request_id="")
                return {"ids": [], "count": 0, "job_id": job.id}
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
                for p, mid in zip(prepared, ids if items else [], strict=True)
            ]
            statements = await reconcile_rules(
                conn,
                workspace,
                self._memories,
                list(zip(rules, prepared_rules, strict=True)),
                ids,
                actor=principal.actor,
                request_id=request_id,
                now=now,
            )
            # One insert for the turns and the statements (two could deadlock: see reconcile.Applier).
            rows = await self._memories.insert(
                conn, workspace, [*final, *statements], actor=principal.actor, request_id=request_id, now=now
            )
            written.extend(rows[: len(final)])
            result: dict[str, Any] = {"ids": [m.id for m in written], "count": len(ids)}
            if rules:
                result["rule_ids"] = [m.id for m in rows[len(final) :]]
            if extract:
                job, _ = await self._jobs.enqueue(
                    conn, workspace, scope, ids, actor=principal.actor, request_id=request_id
                )
                result["job_id"] = job.id
            return result

        written: list[Memory] = []
        result, stored = await self._ledger.once(workspace, request, work, written)
        if rules:
            return await self._with_rules(workspace, stored, int(result["count"]), result.get("rule_ids", []), method)
        return await self._result(workspace, stored, int(result["count"]), method, result.get("job_id"), wait=wait)

    async def _with_rules(
        self, workspace: Workspace, stored: list[Memory], count: int, rule_ids: list[str], method: str
    ) -> ConversationResult:
        """The reply of a write whose statements the no-LLM extractor stored: the turns and,
        as `extracted`, those statement memories as they are now."""
        async with self._db.tenant(workspace.key) as conn:
            extracted = await self._ledger.memories_of(conn, workspace, {"ids": rule_ids})
        return ConversationResult(stored, count, method, None, extracted)

    async def _result(
        self,
        workspace: Workspace,
        stored: list[Memory],
        count: int,
        method: str,
        job_id: str | None,
        *,
        wait: bool,
    ) -> ConversationResult:
        """The reply of WriteConversation: with a job, the job (waited for with *wait*)
        and, once done, the memories it added or changed, as they are now."""
        if not job_id or self._extraction is None:
            return ConversationResult(stored, count, method)
        if wait:
            job = await self._extraction.run_now(workspace, str(job_id), self._wait_seconds)
        else:
            job = await self._extraction.get(workspace, str(job_id))
        extracted: list[Memory] = []
        if job.status is JobStatus.DONE:
            async with self._db.tenant(workspace.key) as conn:
                extracted = await self._ledger.memories_of(conn, workspace, {"ids": job.result.get("memory_ids", [])})
        return ConversationResult(stored, count, method, job, extracted)
