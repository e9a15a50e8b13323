"""SummarizeSession's memories written back with reconciliation (issue 11): the session
summary is stored as AddMemories stores it (a repeated summary is a NOOP duplicate), and
the memories the LLM extracted from the span go through the same reconciliation as a
WriteConversation extraction job — the nearest stored memories of the scope's user and
agent shown to the model as ordinals, ADD / UPDATE / SUPERSEDE / NOOP applied in one
tenant transaction with the decisions on the events (`memplane.server.writeback.reconcile`) —
so summarising the same span again does not duplicate its facts, and a changed fact
supersedes the old one.

DELETE is never applied here: a summary carries no explicit forget request. Without an
LLM on this server, or when the reconciliation call fails, the extracted memories are
added as AddMemories adds them (exact and normalised duplicates still NOOP) and the
reply says so (the reconciliation `SessionFactWriter.write` returns).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from memplane.domain.extraction import ExtractionJob, JobStatus
from memplane.domain.models import Memory, NewMemory, Principal, Workspace
from memplane.server.llm.chat import LLMError
from memplane.server.llm.extraction import Fact
from memplane.server.storage.database import Connection
from memplane.server.writeback.jobs import ExtractionRunner
from memplane.server.writeback.reconcile import Audit, JobContext
from memplane.server.writeback.requests import Ledger, WriteRequest

Adder = Callable[[Principal, Workspace, Sequence[NewMemory], str], Awaitable[list[Memory]]]


class SessionFactWriter:
    """Writes a summary and its extracted memories: SummarizeSession's write (compaction's
    `WriteSession`, wired by the composition root)."""

    def __init__(self, ledger: Ledger, runner: ExtractionRunner | None, add: Adder) -> None:
        """*add* is `WriteBackService.add` (the summary's write and the fallback)."""
        self._ledger = ledger
        self._runner = runner
        self._add = add

    async def write(  # noqa: PLR0917 - positional: compaction calls it as a `WriteSession` callable
        self,
        principal: Principal,
        workspace: Workspace,
        summary: NewMemory,
        facts: Sequence[NewMemory],
        request_id: str = "",
        prompt_sha256: str = "",
    ) -> tuple[list[Memory], str]:
        """Store *summary*, then reconcile *facts* (all of *summary*'s scope) with what is
        stored; *prompt_sha256*, the extraction prompt's hash, goes on every decision.
        Returns the memories written (summary first, then each memory a fact added or
        changed, or the stored memory a fact was a NOOP of) and how the facts were
        reconciled: "llm", or "none: <reason>" when they were added without it. A
        retry with *request_id* gets the first reply (the summary and the facts are
        written under request ids derived from it, `_derived`). Raises what
        `WriteBackService.add` raises; an LLM failure falls back to adding."""
        [stored_summary] = await self._add(principal, workspace, [summary], _derived(request_id, "summary"))
        chat = self._runner.chat if self._runner is not None else None
        if not facts:
            return [stored_summary], "none: no memories extracted"
        if chat is None or self._runner is None:
            added = await self._add(principal, workspace, list(facts), _derived(request_id, "facts"))
            return [stored_summary, *added], "none: no LLM is configured on this server"
        request = WriteRequest.of(
            request_id,
            "SummarizeSession",
            lambda: {"scope": dataclasses.asdict(summary.scope), "messages": list(summary.provenance.message_ids)},
        )
        replayed = await self._ledger.replay(workspace, request)
        if replayed is not None:
            return [stored_summary, *replayed[1]], "llm"
        runner = self._runner
        scope = summary.scope
        now = datetime.now(UTC)
        job = _session_job(workspace, summary, principal, request_id=request_id, now=now)
        audit = Audit("", chat.model_for(workspace), [prompt_sha256] if prompt_sha256 else [], [])
        ordered = [_fact(i, m) for i, m in enumerate(facts, start=1)]
        try:
            steps, vectors = await runner.reconcile(chat, workspace, scope, ordered, (), audit=audit)
        except LLMError as error:
            added = await self._add(principal, workspace, list(facts), _derived(request_id, "facts"))
            return [stored_summary, *added], f"none: reconciliation failed ({error.reason})"
        at = summary.valid_from or now

        async def work(conn: Connection) -> dict[str, Any]:
            ctx = JobContext(conn, workspace, job, vectors, audit, at, now)
            decisions = await runner.applier.apply(ctx, steps)
            ids = list(dict.fromkeys(str(d["memory_id"]) for d in decisions if d["memory_id"]))
            return {"ids": ids, "operations": [d["operation"] + ": " + d["outcome"] for d in decisions]}

        _, stored = await self._ledger.once(workspace, request, work)
        return [stored_summary, *stored], "llm"


def _derived(request_id: str, part: str) -> str:
    """The request id of one part of a SummarizeSession write ("" without one): short
    whatever the caller's id, and apart from the ids clients send ("#" never starts one
    of the server's message ids, nor a request id a client made with new_request_id)."""
    if not request_id:
        return ""
    return f"#session-{part}:{hashlib.sha256(request_id.encode()).hexdigest()[:40]}"


def _fact(index: int, memory: NewMemory) -> Fact:
    """An extracted memory as a reconciliation fact; its speaker is the metadata's
    `speaker` ("assistant", else "user": the extraction parser's default)."""
    return Fact(
        index=index,
        type=memory.type,
        name=memory.name,
        description=memory.description,
        content=memory.content,
        speaker="assistant" if memory.metadata.get("speaker") == "assistant" else "user",
        valid_from=memory.valid_from,
        message_ids=memory.provenance.message_ids,
    )


def _session_job(
    workspace: Workspace, summary: NewMemory, principal: Principal, *, request_id: str, now: datetime
) -> ExtractionJob:
    """What the reconciliation's `Applier` reads of a job, for a SummarizeSession call
    (no job row: id empty, so the memories' metadata names no job)."""
    return ExtractionJob(
        id="",
        workspace_key=workspace.key,
        status=JobStatus.RUNNING,
        scope=summary.scope,
        message_ids=summary.provenance.message_ids,
        actor=principal.actor,
        request_id=request_id,
        attempts=1,
        error="",
        created_at=now,
        updated_at=now,
    )
