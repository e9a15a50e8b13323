"""Extraction jobs run: workers in the server process, and waiting for a job.

`ExtractionRunner` keeps `extraction.workers` worker tasks. Each claims the next due job
(`ExtractionJobStore.claim`: FOR UPDATE SKIP LOCKED, a lease of `lease_seconds`), runs it,
and when none is due waits until woken — by the `JobListener`'s LISTEN/NOTIFY when a job
is queued — or until the earliest retry or lease expiry, at most `poll_seconds` (the
slow poll that covers a notification missed while the listener reconnected).

A job, outside any transaction: read its messages; ask the model for memories (call 1);
embed them; find the nearest stored memories of the same user and agent (hybrid search
of `memplane.server.storage.search`, the session ignored: a fact from another session is the
same fact); ask the model to reconcile (call 2, skipped when nothing is stored nearby:
everything is ADD). Then ONE tenant transaction: hold the job (still running under this
attempt), apply the steps, mark it done — committed together, or not at all. A failure
(an LLM error, a malformed answer, the database) records the error and queues the job
again after `retry_seconds`, until `max_attempts`, then leaves it failed; a worker
killed mid-job leaves the job running until its lease passes, and the next claim runs
it again from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memplane.domain.extraction import ExtractionJob
from memplane.domain.filters import MemoryFilter
from memplane.domain.models import ConversationMessage, Memory, MemoryType, Scope, Workspace, index_text
from memplane.domain.ranking import FusionMethod, Ranking
from memplane.errors import MemplaneError, NotFoundError
from memplane.server.background import cancel
from memplane.server.llm.chat import ChatModel, Completion, LLMError
from memplane.server.llm.extraction import (
    FACTS_SCHEMA,
    Extraction,
    Fact,
    ForgetRequest,
    extraction_prompt,
    parse_extraction,
    prompt_sha256,
    session_time,
)
from memplane.server.quota.fair import current_flow, flow_of
from memplane.server.quota.meter import EmbeddingMeter
from memplane.server.settings import ExtractionSettings, LimitsSettings, RetrievalSettings
from memplane.server.storage import search as search_sql
from memplane.server.storage.database import Database
from memplane.server.storage.jobs import ExtractionJobStore
from memplane.server.storage.memories import MemoryStore
from memplane.server.storage.routing import RoutedDatabase
from memplane.server.storage.workspaces import WorkspaceStore
from memplane.server.writeback.extraction import OPERATIONS_SCHEMA, parse_operations, reconciliation_prompt
from memplane.server.writeback.reconcile import Applier, Audit, JobContext, Step, plan
from memplane.text.segment import segment

_log = logging.getLogger(__name__)

EXTRACTED = tuple(MemoryType(t) for t in ("user", "feedback", "project", "reference", "procedural", "tool"))
MAX_SHOWN = 20
"""Stored memories shown to the model at most (the union of every fact's neighbours)."""
_ERROR_BACKOFF_SECONDS = 1.0


class ExtractionRunner:
    """Workers and waiters of extraction jobs for one server process."""

    def __init__(
        self,
        *,
        db: RoutedDatabase,
        jobs: ExtractionJobStore,
        memories: MemoryStore,
        workspaces: WorkspaceStore,
        meter: EmbeddingMeter,
        chat: ChatModel | None,
        settings: ExtractionSettings,
        retrieval: RetrievalSettings,
        limits: LimitsSettings,
    ) -> None:
        self._db = db
        self._jobs = jobs
        self._workspaces = workspaces
        self._meter = meter
        self._chat = chat
        self._settings = settings
        self._retrieval = retrieval
        self._limits = limits
        self._applier = Applier(memories)
        self._tasks: list[asyncio.Task[None]] = []
        self._inline: set[asyncio.Task[None]] = set()  # run_now's attempts
        self._wakes: list[asyncio.Event] = []
        self._waiters: dict[tuple[int, str], set[asyncio.Event]] = {}

    @property
    def configured(self) -> bool:
        """Whether an LLM is configured (without one, extraction is refused)."""
        return self._chat is not None

    def start(self) -> None:
        """Start the workers, `workers` on each database cluster (none without an LLM, or
        with `workers` 0). Idempotent."""
        if self._tasks or self._chat is None:
            return
        for db in self._db.primaries():
            for n in range(self._settings.workers):
                wake = asyncio.Event()
                self._wakes.append(wake)
                task = asyncio.get_running_loop().create_task(self._work(db, wake), name=f"memplane-extract-{n}")
                self._tasks.append(task)

    async def stop(self) -> None:
        """Stop the workers and run_now's attempts; a job in progress is abandoned (its
        lease lets another take it)."""
        tasks, self._tasks, self._wakes = [*self._tasks, *self._inline], [], []
        for task in tasks:
            await cancel(task)

    def wake(self) -> None:
        """A job was queued (JobListener): every idle worker looks."""
        for wake in self._wakes:
            wake.set()

    def finished(self, workspace_key: int, job_id: str) -> None:
        """A job finished on some server (JobListener): wake its waiters."""
        for event in self._waiters.get((workspace_key, job_id), ()):
            event.set()

    async def wait(self, workspace: Workspace, job_id: str, within_seconds: float) -> ExtractionJob:
        """The job once finished (done or failed), or as it is after *within_seconds*.
        Woken by the job's completion notification; re-reads at most every poll_seconds.
        Raises `NotFoundError` for a job the workspace does not have."""
        deadline = time.monotonic() + within_seconds
        event = asyncio.Event()
        key = (workspace.key, job_id)
        self._waiters.setdefault(key, set()).add(event)
        try:
            while True:
                event.clear()
                job = await self.get(workspace, job_id)
                remaining = deadline - time.monotonic()
                if job.finished or remaining <= 0:
                    return job
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, self._settings.poll_seconds))
        finally:
            self._waiters[key].discard(event)
            if not self._waiters[key]:
                del self._waiters[key]

    async def get(self, workspace: Workspace, job_id: str) -> ExtractionJob:
        """One job of the workspace. Raises `NotFoundError`."""
        async with self._db.tenant(workspace.key) as conn:
            job = await self._jobs.get(conn, workspace, job_id)
        if job is None:
            raise NotFoundError("extraction job", job_id)
        return job

    async def run_now(self, workspace: Workspace, job_id: str, within_seconds: float) -> ExtractionJob:
        """Run job *job_id* now if no worker holds it (WriteConversation with wait), else
        wait for it; then as `wait`. Cancelling this call cancels the wait only."""
        started = time.monotonic()
        claimed = await self._jobs.claim(
            await self._db.primary(workspace.key),
            lease_seconds=self._settings.lease_seconds,
            workspace_key=workspace.key,
            job_id=job_id,
        )
        if claimed is not None:
            # The attempt runs in a task of the runner, not of the request: a caller that
            # cancels (or passes its deadline) stops waiting, never the attempt, which
            # finishes as a worker's would. Its lease is not released early, so no worker
            # starts the job a second time while this attempt still runs.
            task = asyncio.get_running_loop().create_task(self._run(claimed), name=f"memplane-extract-now-{job_id}")
            self._inline.add(task)
            task.add_done_callback(self._inline.discard)
            await asyncio.shield(task)
        return await self.wait(workspace, job_id, max(0.0, within_seconds - (time.monotonic() - started)))

    # -- workers ------------------------------------------------------------------------
    async def _work(self, db: Database, wake: asyncio.Event) -> None:
        """A worker of the jobs of one database cluster's workspaces (*db*: its primary)."""
        while True:
            wake.clear()
            try:
                job = await self._jobs.claim(db, lease_seconds=self._settings.lease_seconds)
                if job is not None:
                    await self._run(job)
                    continue
                due = await self._jobs.seconds_to_next(db)
            except MemplaneError as error:  # the database is down: try again shortly
                _log.warning("extraction worker: %s", error)
                due = _ERROR_BACKOFF_SECONDS
            except Exception:  # a bug must not end the worker: log it and look again shortly
                _log.exception("extraction worker failed; continuing")
                due = _ERROR_BACKOFF_SECONDS
            pause = self._settings.poll_seconds if due is None else min(self._settings.poll_seconds, max(due, 0.01))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), pause)

    async def _run(self, job: ExtractionJob) -> None:
        """One attempt of *job*: done, or its error recorded (queued again or failed)."""
        token = current_flow.set(None)  # `_execute` sets the job's workspace's; the worker runs on as the server
        try:
            await self._attempt(job)
        finally:
            current_flow.reset(token)

    async def _attempt(self, job: ExtractionJob) -> None:
        if job.attempts > self._settings.max_attempts:
            error = f"attempt {job.attempts - 1} stopped before finishing (its worker was lost)"
            # This attempt did not run; the lost one's failure was recorded by the claim
            await self._jobs.fail(
                await self._db.primary(job.workspace_key),
                job,
                job.error or error,
                final=True,
                retry_seconds=0,
                attempted=False,
            )
            return
        final = job.attempts >= self._settings.max_attempts
        try:
            await self._execute(job)
        except LLMError as error:
            reason = f"LLM: {error.reason}"
        except NotFoundError as error:
            reason, final = str(error), True  # the workspace was deleted
        except MemplaneError as error:
            reason = str(error)
        except Exception as error:  # a bug must not kill the worker; the job records it
            _log.exception("extraction job %s failed", job.id)
            reason = f"internal error ({type(error).__name__})"
        else:
            self.finished(job.workspace_key, job.id)
            return
        _log.warning("extraction job %s attempt %d failed: %s", job.id, job.attempts, reason)
        await self._jobs.fail(
            await self._db.primary(job.workspace_key),
            job,
            reason,
            final=final,
            retry_seconds=self._settings.retry_seconds,
        )
        self.finished(job.workspace_key, job.id)

    async def _execute(self, job: ExtractionJob) -> None:
        chat = self._chat
        if chat is None:
            raise LLMError("no LLM is configured on this server")
        workspace = await self._workspaces.get_by_key(job.workspace_key)
        current_flow.set(flow_of(workspace))  # its share of the pool and the embedder, as its requests' have
        cost = _Cost(queue_seconds=(job.updated_at - job.created_at).total_seconds())
        with cost.timing("database"):
            async with self._db.tenant(workspace.key) as conn:
                messages = await self._jobs.messages(conn, job)
        now = datetime.now(UTC)
        audit = Audit(job.id, chat.model_for(workspace), [], [])
        extraction, steps, vectors = await self._decide(chat, workspace, job, messages, audit=audit, cost=cost, now=now)
        at = session_time(messages, now)
        started = time.perf_counter()
        async with self._db.tenant(workspace.key) as conn:
            if not await self._jobs.hold(conn, job):
                _log.info("extraction job %s: lease taken over; attempt %d applies nothing", job.id, job.attempts)
                return
            ctx = JobContext(conn, workspace, job, vectors, audit, at, now)
            decisions = await self._applier.apply(ctx, steps)
            cost.seconds["database"] += time.perf_counter() - started  # the commit's round trip aside
            result = {
                "memory_ids": sorted({d["memory_id"] for d in decisions if d["memory_id"]}),
                "operations": decisions,
                "model": audit.model,
                "prompt_sha256": audit.prompt_sha256,
                "repairs": audit.repairs,
                "facts": len(extraction.facts),
                "forget_requests": len(extraction.forget),
                "cost": cost.as_json(),
            }
            await self._jobs.finish(conn, job, result)

    async def _decide(
        self,
        chat: ChatModel,
        workspace: Workspace,
        job: ExtractionJob,
        messages: Sequence[ConversationMessage],
        *,
        audit: Audit,
        cost: _Cost,
        now: datetime,
    ) -> tuple[Extraction, list[Step], dict[int, np.ndarray]]:
        """Everything before the transaction: call 1, the embeddings, the neighbours,
        call 2; the extraction, the checked steps and each fact's vector by ordinal."""
        limits = (self._limits.max_name_bytes, self._limits.max_description_bytes, self._limits.max_content_bytes)
        extraction = Extraction([], [], ())
        if messages:
            prompt = extraction_prompt(messages, now=now)
            with cost.timing("llm"):
                answer = await chat.chat(
                    prompt, json_mode=True, schema=FACTS_SCHEMA, schema_name="memories", workspace=workspace
                )
            cost.count(answer)
            audit.model = answer.model
            audit.prompt_sha256.append(prompt_sha256(prompt))
            extraction = parse_extraction(answer.text, limits=limits)
            audit.repairs += extraction.repairs
        steps, vectors = await self.reconcile(
            chat, workspace, job.scope, extraction.facts, extraction.forget, audit=audit, cost=cost
        )
        return extraction, steps, vectors

    async def reconcile(
        self,
        chat: ChatModel,
        workspace: Workspace,
        scope: Scope,
        facts: Sequence[Fact],
        forget: Sequence[ForgetRequest],
        *,
        audit: Audit,
        cost: _Cost | None = None,
    ) -> tuple[list[Step], dict[int, np.ndarray]]:
        """Call 2 for *facts* (also SummarizeSession's, `memplane.server.writeback.session_facts`):
        embed them, find the nearest stored memories of the scope's user and agent, ask the
        model for operations by ordinal (no call when nothing is stored nearby: all ADD);
        the checked steps and each fact's vector by ordinal. Raises `LLMError`."""
        cost = cost or _Cost(queue_seconds=0.0)
        texts = [index_text(f.name, f.description, f.content) for f in facts]
        texts += [r.content for r in forget]
        if not texts:
            return [], {}
        with cost.timing("embedding"):
            embedded = await self._meter.for_workspace(workspace).embed_documents(texts)
        vectors = {f.index: embedded[i] for i, f in enumerate(facts)}
        with cost.timing("database"):
            shown = await self._neighbours(workspace, scope, texts, embedded)
        audit.input_memory_ids = [m.id for m in shown]
        if not shown:  # nothing stored nearby: every fact is new
            return plan([], facts, forget, shown), vectors
        prompt = reconciliation_prompt(facts, forget, shown)
        with cost.timing("llm"):
            answer = await chat.chat(
                prompt, json_mode=True, schema=OPERATIONS_SCHEMA, schema_name="operations", workspace=workspace
            )
        cost.count(answer)
        audit.model = answer.model
        audit.prompt_sha256.append(prompt_sha256(prompt))
        operations, repairs = parse_operations(answer.text)
        audit.repairs += repairs
        return plan(operations, facts, forget, shown), vectors

    @property
    def chat(self) -> ChatModel | None:
        """The server's chat model (None: no LLM configured)."""
        return self._chat

    @property
    def applier(self) -> Applier:
        """Applies checked steps in a tenant transaction (`memplane.server.writeback.reconcile`)."""
        return self._applier

    async def _neighbours(
        self, workspace: Workspace, scope: Scope, texts: Sequence[str], vectors: np.ndarray
    ) -> list[Memory]:
        """The stored memories nearest to *texts* of the same user and agent (extracted
        types only), best first, each once, at most MAX_SHOWN."""
        cfg = self._retrieval
        spec = search_sql.SearchSpec(
            use_vector=True,
            use_lexical=True,
            depth=max(20, self._settings.neighbours * 4),
            top_k=self._settings.neighbours,
            min_score=0.0,
            exact=True,
            prefilter=False,
            lexical_budget=cfg.lexical_candidate_postings,
            lexical_cap=cfg.lexical_max_candidates,
            ranking=Ranking(fusion=FusionMethod.RRF, vector_weight=0.5, rrf_k=cfg.rrf_k),  # no query-aware terms
            k1=cfg.bm25_k1,
            b=cfg.bm25_b,
        )
        flt = MemoryFilter(user_id=scope.user_id, agent_id=scope.agent_id, types=EXTRACTED)
        queries = [(segment(t), vectors[i]) for i, t in enumerate(texts)]
        now = datetime.now(UTC)

        async with self._db.tenant_pipeline(workspace.key, {}) as conn:
            cursors = await search_sql.send(conn, workspace, queries, spec, flt, now=now)
        ranked = search_sql.merge_queries(await search_sql.read(cursors))
        return [row.memory for row, _ in ranked[:MAX_SHOWN]]


@dataclass
class _Cost:
    """What one attempt cost: chat calls and their tokens, seconds per part."""

    queue_seconds: float
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"llm": 0.0, "embedding": 0.0, "database": 0.0})

    @contextlib.contextmanager
    def timing(self, part: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] += time.perf_counter() - started

    def count(self, answer: Completion) -> None:
        self.llm_calls += 1
        self.prompt_tokens += answer.prompt_tokens
        self.completion_tokens += answer.completion_tokens

    def as_json(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "queue_seconds": self.queue_seconds,
            **{f"{part}_seconds": value for part, value in self.seconds.items()},
        }
