"""Reconciliation: the model's operations checked against what it was shown, then
applied in the job's one transaction.

`plan` turns the operations (ordinals as the model wrote them) into `Step`s: each fact
gets exactly one; an operation naming an unknown fact or memory ordinal, an unknown
operation, a second decision on one fact or one memory, or a DELETE with no explicit
forget request in the span is skipped and recorded (never guessed at); a fact no
operation names is added. `apply` performs the steps with `MemoryStore` (so stats,
quotas, lexeme counts and history are kept as for every write) and attaches each
decision to the event it caused:

- ADD: a new memory.
- UPDATE: the memory rewritten to the fact (a new version, an UPDATE event).
- SUPERSEDE: the old memory's valid_to closed at the time the fact became true (an
  UPDATE event; the old fact stays readable with include_superseded), and the fact added
  as a new memory whose metadata names it (`supersedes`).
- DELETE: the memory deleted (a DELETE event keeps it as `before`).
- NOOP: nothing changes; a NOOP event on the memory records the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from memplane.domain.extraction import ExtractionJob
from memplane.domain.models import EventKind, Memory, NewMemory, Provenance, Workspace, index_text
from memplane.server.llm.extraction import Fact, ForgetRequest
from memplane.server.storage.database import Connection
from memplane.server.storage.history import annotate_latest_event, record_events
from memplane.server.storage.inserts import PreparedMemory
from memplane.server.storage.memories import Change, MemoryStore
from memplane.server.writeback.extraction import Operation
from memplane.text.segment import segment

_NEEDS_FACT = frozenset({"ADD", "UPDATE", "SUPERSEDE", "NOOP"})
_NEEDS_MEMORY = frozenset({"UPDATE", "SUPERSEDE", "NOOP", "DELETE"})


@dataclass(frozen=True)
class Step:
    """One checked operation: `fact` / `memory` resolved (None where not used);
    `skipped` the reason it is not applied (empty: apply it)."""

    operation: str
    fact: Fact | None
    memory: Memory | None
    fact_ordinal: int | None = None
    memory_ordinal: int | None = None
    skipped: str = ""


@dataclass
class Audit:
    """What every decision of one job shares: the job, the model, the prompts' hashes and
    the ids of the stored memories shown to the model (in ordinal order)."""

    job_id: str
    model: str
    prompt_sha256: list[str]
    input_memory_ids: list[str]
    repairs: list[str] = field(default_factory=list)

    def decision(self, step: Step, outcome: str) -> dict[str, Any]:
        """The audit record of *step* (stored on its event and in the job's result)."""
        return {
            "operation": step.operation,
            "job_id": self.job_id,
            "model": self.model,
            "prompt_sha256": self.prompt_sha256,
            "input_memory_ids": self.input_memory_ids,
            "fact": f"F{step.fact_ordinal}" if step.fact_ordinal is not None else None,
            "memory": f"[{step.memory_ordinal}]" if step.memory_ordinal is not None else None,
            "outcome": outcome,
        }


def plan(
    operations: Sequence[Operation], facts: Sequence[Fact], forget: Sequence[ForgetRequest], shown: Sequence[Memory]
) -> list[Step]:
    """The steps for *operations* (see the module docstring), in the model's order, then
    an ADD for each fact no operation decided."""
    steps: list[Step] = []
    decided: set[int] = set()
    changed: set[int] = set()
    for op in operations:
        fact = facts[op.fact - 1] if op.fact is not None and 1 <= op.fact <= len(facts) else None
        memory = shown[op.memory - 1] if op.memory is not None and 1 <= op.memory <= len(shown) else None
        reason = ""
        if op.operation not in _NEEDS_FACT | _NEEDS_MEMORY:
            reason = f"unknown operation {op.operation!r}"
        elif op.operation in _NEEDS_FACT and fact is None:
            reason = f"unknown fact ordinal F{op.fact}" if op.fact is not None else "no fact named"
        elif op.operation in _NEEDS_MEMORY and memory is None:
            reason = f"unknown memory ordinal [{op.memory}]" if op.memory is not None else "no memory named"
        elif op.operation == "DELETE" and not forget:
            reason = "DELETE without an explicit forget request in the conversation"
        elif fact is not None and fact.index in decided:
            reason = f"F{fact.index} was already decided by an earlier operation"
        elif op.operation in ("UPDATE", "SUPERSEDE", "DELETE") and op.memory in changed:
            reason = f"[{op.memory}] was already changed by an earlier operation"
        if not reason:
            if fact is not None:
                decided.add(fact.index)
            if op.operation in ("UPDATE", "SUPERSEDE", "DELETE") and op.memory is not None:
                changed.add(op.memory)
        steps.append(
            Step(
                op.operation or "?",
                fact if op.operation in _NEEDS_FACT else None,
                memory if op.operation in _NEEDS_MEMORY else None,
                op.fact,
                op.memory,
                reason,
            )
        )
    steps += [Step("ADD", f, None, f.index) for f in facts if f.index not in decided]
    return steps


@dataclass(frozen=True)
class JobContext:
    """What every step of one job's transaction uses: the connection, workspace and job,
    each fact's embedding by ordinal, the audit, the session's time and the write time."""

    conn: Connection
    workspace: Workspace
    job: ExtractionJob
    vectors: dict[int, np.ndarray]
    audit: Audit
    session_time: datetime
    now: datetime


@dataclass(frozen=True)
class _Pending:
    """A memory to add at the end of the job (all in one insert): its fact, when it
    became true, the memory it supersedes, and where its decision is in the result."""

    fact: Fact
    valid_from: datetime | None
    supersedes: str
    decision: dict[str, Any]
    index: int


class Applier:
    """Applies a job's steps in the caller's tenant transaction: UPDATE, SUPERSEDE's
    closing, DELETE and NOOP in the model's order, then every new memory (ADD and
    SUPERSEDE's replacement) in ONE insert: each insert takes the workspace's lexeme
    counters and then its stats row, so several inserts in one transaction could each
    hold the row while waiting for counters another writer holds (a deadlock)."""

    def __init__(self, memories: MemoryStore) -> None:
        self._memories = memories

    async def apply(self, ctx: JobContext, steps: Sequence[Step]) -> list[dict[str, Any]]:
        """Apply *steps*; return the decisions with `memory_id` (the memory made or
        changed, None for a skipped step) for the job's result."""
        done: list[dict[str, Any]] = []
        pending: list[_Pending] = []
        for step in steps:
            if step.skipped:
                done.append({**ctx.audit.decision(step, f"skipped: {step.skipped}"), "memory_id": None})
                continue
            memory_id, outcome, new = await self._one(ctx, step)
            done.append({**ctx.audit.decision(step, outcome), "memory_id": memory_id})
            if new is not None:
                pending.append(_Pending(new[0], new[1], new[2], ctx.audit.decision(step, outcome), len(done) - 1))
        added, duplicates = await self._add(ctx, pending)
        for i, (item, memory) in enumerate(zip(pending, added, strict=True)):
            memory_id, decision = memory.id, item.decision
            if i in duplicates:  # its text is already a memory of the scope: the NOOP event is on that one
                memory_id, decision = duplicates[i], {**decision, "outcome": "duplicate of a stored memory"}
                done[item.index]["outcome"] = decision["outcome"]
            await annotate_latest_event(ctx.conn, ctx.workspace.key, memory_id, decision, at=ctx.now)
            done[item.index]["memory_id"] = memory_id
        return done

    async def _one(
        self, ctx: JobContext, step: Step
    ) -> tuple[str | None, str, tuple[Fact, datetime | None, str] | None]:
        """Apply one step but for its new memory; (memory changed, outcome, the new
        memory to add as (fact, valid_from, supersedes) or None)."""
        conn, workspace, job, now = ctx.conn, ctx.workspace, ctx.job, ctx.now
        current = None
        if step.memory is not None:
            current = await self._memories.get(conn, workspace, step.memory.id, lock=True)
            if current is None:
                return None, "skipped: the memory was deleted meanwhile", None
        fact = step.fact
        decision = ctx.audit.decision(step, "applied")
        if step.operation == "ADD" and fact is not None:
            return None, "applied", (fact, None, "")
        if current is None:
            return None, "skipped: no memory", None
        actor, request_id = job.actor, job.request_id
        if step.operation == "NOOP":
            await record_events(
                conn,
                workspace.key,
                [(current.id, EventKind.NOOP, current, current, current.scope)],
                actor=actor,
                request_id=request_id,
                now=now,
            )
        elif step.operation == "DELETE":
            await self._memories.delete(conn, workspace, current, actor=actor, request_id=request_id, now=now)
        elif step.operation == "UPDATE" and fact is not None:
            text = index_text(fact.name, fact.description, fact.content)
            fields: dict[str, Any] = {
                "name": fact.name,
                "description": fact.description,
                "content": fact.content,
                "metadata": {**current.metadata, **_metadata(job, fact, ctx.audit)},
                "content_bytes": len(text.encode()),
            }
            change = Change(fields=fields, embedding=ctx.vectors[fact.index], lexical_text=segment(text))
            await self._memories.update(conn, workspace, current, change, actor=actor, request_id=request_id, now=now)
        elif step.operation == "SUPERSEDE" and fact is not None:
            closing = fact.valid_from or ctx.session_time
            if closing <= current.valid_from:
                closing = max(now, current.valid_from + timedelta(seconds=1))
            close = Change(fields={"valid_to": closing})
            await self._memories.update(conn, workspace, current, close, actor=actor, request_id=request_id, now=now)
            await annotate_latest_event(conn, workspace.key, current.id, decision, at=now)
            return None, "applied", (fact, closing, current.id)
        await annotate_latest_event(conn, workspace.key, current.id, decision, at=now)
        return current.id, "applied", None

    async def _add(self, ctx: JobContext, pending: Sequence[_Pending]) -> tuple[list[Memory], dict[int, str]]:
        """Insert the new memories of *pending*, in order, in one insert, deduplicated as
        AddMemories is (`MemoryStore.insert_deduplicated`): the memories, and the stored
        memory holding the text of each not stored, by position."""
        job = ctx.job
        prepared = []
        for item in pending:
            fact = item.fact
            metadata = _metadata(job, fact, ctx.audit)
            if item.supersedes:
                metadata["supersedes"] = item.supersedes
            ids = tuple(i for i in fact.message_ids if i in job.message_ids) or job.message_ids
            new = NewMemory(
                content=fact.content,
                scope=job.scope,
                type=fact.type,
                name=fact.name,
                description=fact.description,
                metadata=metadata,
                valid_from=item.valid_from or fact.valid_from or ctx.session_time,
                provenance=Provenance(session_id=job.scope.session_id, message_ids=ids),
            )
            prepared.append(
                PreparedMemory(memory=new, lexical_text=segment(new.index_text()), embedding=ctx.vectors[fact.index])
            )
        if not prepared:
            return [], {}
        return await self._memories.insert_deduplicated(
            ctx.conn, ctx.workspace, prepared, actor=job.actor, request_id=job.request_id, now=ctx.now
        )


def _metadata(job: ExtractionJob, fact: Fact, audit: Audit) -> dict[str, Any]:
    """Metadata of a memory the LLM path wrote: who said it ("user" / "assistant": an
    assistant's suggestion is not a user fact), how and by which job and model."""
    made = {"extracted_by": "llm", "speaker": fact.speaker, "model": audit.model}
    return {**made, "job_id": job.id} if job.id else {"kind": "extracted", **made}  # no job: SummarizeSession
