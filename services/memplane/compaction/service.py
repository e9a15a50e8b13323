"""CompactionService: ReMe's context tools (ReMeLight's check_context, compact_memory,
compact_tool_result, pre_reasoning_hook, summary_memory) for every agent of a workspace.

The loss-proof rules, each enforced here:
- a failed summariser (error, timeout, answer without the sections) returns the previous
  summary unchanged with `compacted=False`; the caller keeps its messages;
- a cut tool output is stored whole before the cut message is returned; an output cut
  before is never stored again;
- compacted messages are recorded in the session transcript and only marked compacted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from memplane.compaction import tool_output
from memplane.compaction.extractive import ExtractiveSummarizer
from memplane.compaction.language import Language, as_language, detect_language
from memplane.compaction.llm import ExtractedMemory, LLMSummarizer, SummarizerError
from memplane.compaction.split import split_context
from memplane.compaction.tokens import TokenCounter, token_counter
from memplane.domain.context import (
    TOKEN_ENCODINGS,
    CompactionOutcome,
    ContextMessage,
    ContextSplit,
    SummarizerChoice,
    SummaryMethod,
    ToolResultBlock,
    ToolResultLimits,
    Truncation,
)
from memplane.domain.context_json import blocks_to_json
from memplane.domain.models import Memory, MemoryType, NewMemory, Principal, Provenance, Scope, Workspace
from memplane.domain.validation import Violations, check_request_id, check_scope, check_text
from memplane.errors import FailedPreconditionError, FieldViolation, InvalidArgumentError, NotFoundError
from memplane.settings import CompactionSettings, LimitsSettings
from memplane.storage.blobs import MAX_RETENTION_SECONDS, MIN_RETENTION_SECONDS, ToolResultBlobStore
from memplane.storage.database import Connection, Database
from memplane.storage.transcripts import TranscriptEntry, TranscriptStore

_log = logging.getLogger(__name__)

NO_SCOPE = Scope()
# A re-sent cut output pushes its blob's expiry out once this much would be gained.
EXTEND_AFTER = timedelta(minutes=10)
# Smallest summary budget a request may set: room for a heading and a few items.
MIN_SUMMARY_TOKENS = 64
# An answer over this many times the budget is refused (LLMs overshoot a little; a
# summary several times its budget defeats compaction).
OVER_BUDGET_FACTOR = 2


# Contexts with more messages than this are counted off the event loop (quicktok
# releases the GIL while it encodes, so the loop keeps serving other calls).
OFFLOAD_MESSAGES = 512


async def count_messages(counter: TokenCounter, messages: Sequence[ContextMessage]) -> list[int]:
    """Tokens of each message; in a worker thread for large contexts."""
    if len(messages) <= OFFLOAD_MESSAGES:
        return counter.count_messages(messages)
    return await asyncio.to_thread(counter.count_messages, messages)


class MemoryWriter(Protocol):
    """The write-back path (`WriteBackService.add`), injected by the composition root so
    compaction and write-back stay independent modules."""

    async def add(
        self, principal: Principal, workspace: Workspace, items: Sequence[NewMemory], request_id: str = ""
    ) -> list[Memory]: ...


@dataclass(frozen=True)
class ToolCompaction:
    """Messages with long tool outputs cut; how many were cut and bytes removed."""

    messages: list[ContextMessage]
    truncated_count: int
    removed_bytes: int


@dataclass(frozen=True)
class ToolResultSlice:
    """Part of a stored tool output (see `tool_output.read`)."""

    text: str
    next_line: int
    next_column: int
    total_lines: int
    total_bytes: int
    expires_at: datetime


@dataclass(frozen=True)
class Prepared:
    """The result of the pre-reasoning hook."""

    messages: list[ContextMessage]
    summary: str
    split: ContextSplit
    encoding: str
    compaction: CompactionOutcome | None
    truncated_tool_results: int
    memories: list[Memory]


@dataclass(frozen=True)
class SessionMemories:
    """Memories written from a session span and how they were made."""

    memories: list[Memory]
    summary_method: str
    extraction: str


@dataclass(frozen=True)
class PrepareOptions:
    """Per-call knobs of `prepare_context`; zero / empty means the server default."""

    system_prompt: str = ""
    previous_summary: str = ""
    max_input_tokens: int = 0
    compact_ratio: float = 0.0
    reserve_tokens: int = 0
    tool_result_limits: ToolResultLimits | None = None
    skip_tool_result_compaction: bool = False
    encoding: str = ""
    language: str = ""
    max_summary_tokens: int = 0
    summarizer: SummarizerChoice = SummarizerChoice.AUTO
    scope: Scope = NO_SCOPE
    write_memories: bool = False


class CompactionService:
    """Token checks, summaries, tool-output offload and transcripts of one server."""

    def __init__(
        self,
        *,
        db: Database,
        blobs: ToolResultBlobStore,
        transcripts: TranscriptStore,
        extractive: ExtractiveSummarizer,
        llm: LLMSummarizer | None,
        writer: MemoryWriter,
        settings: CompactionSettings,
        limits: LimitsSettings,
    ) -> None:
        self._db = db
        self._blobs = blobs
        self._transcripts = transcripts
        self._extractive = extractive
        self._llm = llm
        self._writer = writer
        self._settings = settings
        self._limits = limits

    # -- helpers --------------------------------------------------------------------
    def _counter(self, workspace: Workspace, encoding: str, field: str = "encoding") -> TokenCounter:
        name = encoding or workspace.token_encoding
        if name not in TOKEN_ENCODINGS:
            raise InvalidArgumentError(FieldViolation(field, f"must be one of {', '.join(TOKEN_ENCODINGS)}"))
        return token_counter(name)

    def _language(self, language: str, messages: Sequence[ContextMessage], field: str = "language") -> Language:
        if not language:
            return detect_language(m.text() for m in messages)
        try:
            return as_language(language)
        except ValueError:
            raise InvalidArgumentError(FieldViolation(field, "must be 'zh', 'en' or empty (detect)")) from None

    def _default_reserve(self, window_tokens: float, threshold_tokens: int) -> int:
        """ReMe's reserve (10,000 tokens), but at most `reserve_ratio` (10%) of the model's
        window (CoPaw's memory_reserve_ratio) and at most half the threshold, so a small
        window or a small compact_ratio still compacts to under the threshold; >= 1."""
        s = self._settings
        return max(1, min(s.reserve_tokens, int(window_tokens * s.reserve_ratio), threshold_tokens // 2))

    def default_tool_limits(self) -> ToolResultLimits:
        """The server's tool-output limits."""
        s = self._settings
        return ToolResultLimits(
            recent_max_bytes=s.recent_tool_result_bytes,
            old_max_bytes=s.old_tool_result_bytes,
            keep_last_messages=s.keep_last_messages,
            retention_seconds=s.tool_result_retention_seconds,
        )

    # -- check context -------------------------------------------------------------
    async def check_context(
        self,
        workspace: Workspace,
        messages: Sequence[ContextMessage],
        *,
        system_prompt: str = "",
        previous_summary: str = "",
        threshold_tokens: int = 0,
        reserve_tokens: int = 0,
        encoding: str = "",
    ) -> tuple[ContextSplit, str]:
        """Counts and split (see `compaction.split.split_context`); threshold 0 means
        ReMe's `max_input_tokens * compact_ratio * 0.95`, reserve 0 the server's.
        Returns the split and the encoding used. Raises `InvalidArgumentError` for an
        unknown encoding or a negative budget."""
        v = Violations()
        if threshold_tokens < 0:
            v.add("threshold_tokens", "must not be negative")
        if reserve_tokens < 0:
            v.add("reserve_tokens", "must not be negative")
        s = self._settings
        threshold = threshold_tokens or int(s.max_input_tokens * s.compact_ratio * s.safety_factor)
        if reserve_tokens >= threshold > 0:
            v.add("reserve_tokens", f"must be below the threshold ({threshold} tokens)")
        v.raise_if_any()
        counter = self._counter(workspace, encoding)
        split = await self._split(
            counter=counter,
            messages=messages,
            system_prompt=system_prompt,
            previous_summary=previous_summary,
            threshold=threshold,
            reserve=reserve_tokens or self._default_reserve(threshold / (s.compact_ratio * s.safety_factor), threshold),
        )
        return split, counter.encoding

    async def _split(
        self,
        *,
        counter: TokenCounter,
        messages: Sequence[ContextMessage],
        system_prompt: str,
        previous_summary: str,
        threshold: int,
        reserve: int,
    ) -> ContextSplit:
        system_tokens, summary_tokens = counter.count_texts([system_prompt, previous_summary])
        return split_context(
            messages,
            await count_messages(counter, messages),
            system_prompt_tokens=system_tokens,
            previous_summary_tokens=summary_tokens,
            threshold_tokens=threshold,
            reserve_tokens=reserve,
        )

    # -- compact messages ------------------------------------------------------------
    async def compact_messages(
        self,
        workspace: Workspace,
        messages: Sequence[ContextMessage],
        *,
        previous_summary: str = "",
        language: str = "",
        max_summary_tokens: int = 0,
        summarizer: SummarizerChoice = SummarizerChoice.AUTO,
        scope: Scope = NO_SCOPE,
        encoding: str = "",
    ) -> CompactionOutcome:
        """Summarise *messages* into the structured summary, updating *previous_summary*.

        Never loses a summary: any summariser failure returns *previous_summary* unchanged
        with `compacted=False` and the reason. With `scope.session_id` the messages are
        recorded in the transcript, marked compacted, after a successful summary.
        Raises `InvalidArgumentError` (language, max_summary_tokens, scope, encoding) and
        `FailedPreconditionError` when the LLM is asked for and none is configured."""
        v = Violations()
        self._check_summary_knobs(v, max_summary_tokens, summarizer)
        check_scope(v, "scope", scope, self._limits)
        v.raise_if_any()
        counter = self._counter(workspace, encoding)
        lang = self._language(language, messages)
        budget = max_summary_tokens or self._settings.max_summary_tokens
        input_tokens = sum(await count_messages(counter, messages))
        llm = self._llm if summarizer is not SummarizerChoice.EXTRACTIVE else None
        method = SummaryMethod.LLM if llm is not None else SummaryMethod.EXTRACTIVE
        try:
            if llm is not None:
                summary = await llm.summarize(
                    messages, previous_summary=previous_summary, language=lang, max_summary_tokens=budget
                )
            else:
                summary = await self._extractive.summarize(
                    messages,
                    previous_summary=previous_summary,
                    language=lang,
                    max_summary_tokens=budget,
                    counter=counter,
                )
        except SummarizerError as error:
            _log.warning("summariser (%s) failed, previous summary kept: %s", method, error)
            return self._kept(previous_summary, counter, input_tokens, lang, f"{method} summariser failed: {error}")
        except Exception as error:  # a summary is never lost, whatever went wrong
            _log.exception("summariser (%s) raised; previous summary kept", method)
            return self._kept(
                previous_summary, counter, input_tokens, lang, f"{method} summariser failed: {type(error).__name__}"
            )
        summary_tokens = counter.count_text(summary)
        problem = self._unusable(summary, summary_tokens, budget)
        if problem:
            _log.warning("summariser (%s) answer refused, previous summary kept: %s", method, problem)
            return self._kept(previous_summary, counter, input_tokens, lang, f"{method} summariser failed: {problem}")
        ids = await self.record_transcript(workspace, scope, messages) if scope.session_id else []
        return CompactionOutcome(
            summary=summary,
            method=method,
            compacted=True,
            failure="",
            compacted_message_count=len(messages),
            input_tokens=input_tokens,
            summary_tokens=summary_tokens,
            language=lang,
            transcript_message_ids=tuple(ids),
        )

    async def record_transcript(
        self, workspace: Workspace, scope: Scope, messages: Sequence[ContextMessage]
    ) -> list[str]:
        """Record compacted *messages* in the session transcript, marked compacted (one
        transaction); returns their transcript ids. Messages without an id are recorded
        under a content id (`with_content_ids`), so a retried compaction (a lost reply, a
        second PrepareContext with the same history) does not record them twice."""
        keyed = with_content_ids(messages)
        async with self._db.tenant(workspace.key) as conn:
            return await self._transcripts.record_compacted(conn, workspace, scope, keyed, now=datetime.now(UTC))

    def _check_summary_knobs(self, v: Violations, max_summary_tokens: int, summarizer: SummarizerChoice) -> None:
        """Budget and summariser choice, checked before anything is written. Raises
        `FailedPreconditionError` when the LLM is asked for and none is configured."""
        if max_summary_tokens < 0 or 0 < max_summary_tokens < MIN_SUMMARY_TOKENS:
            v.add("max_summary_tokens", f"must be 0 (the default) or at least {MIN_SUMMARY_TOKENS}")
        if summarizer is SummarizerChoice.LLM and self._llm is None:
            raise FailedPreconditionError("no LLM is configured on this server (set MEMPLANE_LLM__BASE_URL)")

    @staticmethod
    def _unusable(summary: str, summary_tokens: int, budget: int) -> str:
        """Why a summariser's answer must not replace the running summary ("" if usable):
        nothing summarised (an extract without a single sentence), or more than twice the
        budget (a context "compacted" into something larger than asked for)."""
        if not any(line.startswith("- ") and line.strip("- ").strip() for line in summary.splitlines()):
            return "the summary holds no content"
        if summary_tokens > OVER_BUDGET_FACTOR * budget:
            return f"the summary has {summary_tokens} tokens, over {OVER_BUDGET_FACTOR}x the budget of {budget}"
        return ""

    @staticmethod
    def _kept(previous: str, counter: TokenCounter, input_tokens: int, lang: str, failure: str) -> CompactionOutcome:
        return CompactionOutcome(
            summary=previous,
            method=SummaryMethod.PREVIOUS_KEPT,
            compacted=False,
            failure=failure,
            compacted_message_count=0,
            input_tokens=input_tokens,
            summary_tokens=counter.count_text(previous),
            language=lang,
        )

    # -- tool results ------------------------------------------------------------------
    async def compact_tool_results(
        self,
        workspace: Workspace,
        messages: Sequence[ContextMessage],
        *,
        limits: ToolResultLimits | None = None,
        scope: Scope = NO_SCOPE,
        limits_field: str = "limits",
    ) -> ToolCompaction:
        """Cut tool outputs over their byte limit (see `tool_output.plan_limits`), storing
        each whole output as a tool-result blob first (one transaction for the call).

        An output that claims to be cut already (our truncation field or marker) is only
        re-cut if its reference is a blob of this workspace whose content starts with the
        kept head (`ToolResultBlobStore.verify`); a forged, foreign or expired claim is
        treated as a new output and stored whole, marker text included. The same output
        sent again is stored once (the store deduplicates by content and scope). An output
        whose cut would save fewer bytes than the marker costs is left whole. Raises
        `InvalidArgumentError` for limits out of range or a bad scope."""
        lim = limits or self.default_tool_limits()
        v = Violations()
        if lim.recent_max_bytes <= 0:
            v.add(f"{limits_field}.recent_max_bytes", "must be positive")
        if lim.old_max_bytes <= 0:
            v.add(f"{limits_field}.old_max_bytes", "must be positive")
        if not MIN_RETENTION_SECONDS <= lim.retention_seconds <= MAX_RETENTION_SECONDS:
            days = MAX_RETENTION_SECONDS // 86400
            v.add(f"{limits_field}.retention", f"must be {MIN_RETENTION_SECONDS} s to {days} days")
        check_scope(v, "scope", scope, self._limits)
        v.raise_if_any()
        per_message = tool_output.plan_limits(
            messages,
            recent_max_bytes=lim.recent_max_bytes,
            old_max_bytes=lim.old_max_bytes,
            keep_last_messages=lim.keep_last_messages,
        )
        pending = {
            (i, j)
            for i, m in enumerate(messages)
            for j, b in enumerate(m.blocks)
            if isinstance(b, ToolResultBlock) and len(b.output.encode("utf-8")) > per_message[i]
        }
        if not pending:
            return ToolCompaction(list(messages), 0, 0)
        now = datetime.now(UTC)
        retention = timedelta(seconds=lim.retention_seconds)
        out: list[ContextMessage] = []
        truncated = removed = 0
        async with self._db.tenant(workspace.key) as conn:
            for i, message in enumerate(messages):
                blocks = list(message.blocks)
                for j, block in enumerate(blocks):
                    if (i, j) not in pending or not isinstance(block, ToolResultBlock):
                        continue
                    limit = per_message[i]
                    claim = tool_output.claimed_cut(block)
                    blob = None
                    if claim is not None:
                        blob = await self._blobs.verify(conn, workspace, claim[1].ref, claim[0], now=now)
                    if blob is not None:
                        new_block = tool_output.recut(block, limit)
                        if now + retention - blob.expires_at > EXTEND_AFTER:
                            # Still in use: keep it longer. The marker's "kept until" stays
                            # as sent (a lower bound), so the agent's context text does not
                            # change from call to call (prompt caches keep their prefix).
                            await self._blobs.extend(conn, workspace, blob.ref, now + retention)
                    elif tool_output.worth_cutting(block.output, limit):
                        new_block = await self._cut_and_store(
                            conn, workspace, block, limit=limit, scope=scope, retention=retention, now=now
                        )
                        truncated += 1
                    else:
                        continue
                    removed += len(block.output.encode("utf-8")) - len(new_block.output.encode("utf-8"))
                    blocks[j] = new_block
                out.append(message.with_blocks(tuple(blocks)))
        return ToolCompaction(out, truncated, removed)

    async def _cut_and_store(
        self,
        conn: Connection,
        workspace: Workspace,
        block: ToolResultBlock,
        *,
        limit: int,
        scope: Scope,
        retention: timedelta,
        now: datetime,
    ) -> ToolResultBlock:
        """Store *block*'s whole output, then return it cut to *limit* bytes plus the marker."""
        cut = tool_output.cut(block.output, limit)
        stored = await self._blobs.put(
            conn,
            workspace,
            content=block.output,
            scope=scope,
            tool_use_id=block.tool_use_id,
            tool_name=block.name,
            retention=retention,
            now=now,
        )
        trunc = Truncation(
            ref=stored.ref,
            total_bytes=cut.total_bytes,
            total_lines=cut.total_lines,
            kept_bytes=cut.kept_bytes,
            resume_line=cut.resume_line,
            resume_column=cut.resume_column,
            expires_at=stored.expires_at,
        )
        return ToolResultBlock(
            tool_use_id=block.tool_use_id,
            name=block.name,
            output=cut.head + tool_output.marker(trunc),
            truncation=trunc,
        )

    async def read_tool_result(
        self,
        workspace: Workspace,
        ref: str,
        *,
        start_line: int = 0,
        start_column: int = 0,
        line_count: int = 0,
        max_bytes: int = 0,
    ) -> ToolResultSlice:
        """Part of a stored tool output. Raises `NotFoundError` for an unknown, expired or
        another workspace's ref, `InvalidArgumentError` for a bad range."""
        v = Violations()
        if start_line < 0:
            v.add("start_line", "must not be negative")
        if start_column < 0:
            v.add("start_column", "must not be negative")
        if line_count < 0:
            v.add("line_count", "must not be negative")
        if max_bytes < 0:
            v.add("max_bytes", "must not be negative")
        v.raise_if_any()
        async with self._db.tenant(workspace.key) as conn:
            blob = await self._blobs.get(conn, workspace, ref, now=datetime.now(UTC))
        if blob is None:
            raise NotFoundError("tool result", ref)
        try:
            piece = tool_output.read(
                blob.content,
                start_line=start_line or 1,
                start_column=start_column,
                line_count=line_count,
                max_bytes=max_bytes or self._settings.read_max_bytes,
            )
        except ValueError as error:  # tool_output.read names the field first: "start_line ..."
            field = str(error).split(" ", 1)[0].rstrip(":")
            known = ("start_line", "start_column", "line_count", "max_bytes")
            raise InvalidArgumentError(FieldViolation(field if field in known else "start_line", str(error))) from error
        return ToolResultSlice(
            text=piece.text,
            next_line=piece.next_line,
            next_column=piece.next_column,
            total_lines=blob.line_count,
            total_bytes=blob.byte_size,
            expires_at=blob.expires_at,
        )

    # -- prepare context (the pre-reasoning hook) --------------------------------------
    async def prepare_context(
        self,
        principal: Principal,
        workspace: Workspace,
        messages: Sequence[ContextMessage],
        options: PrepareOptions,
    ) -> Prepared:
        """ReMe's pre_reasoning_hook in one call: cut tool outputs, check the context
        against `max_input_tokens * compact_ratio * 0.95` (system prompt and summary
        counted), and compact the older messages when it is exceeded and the split is
        valid. On a summariser failure every message is returned with the previous
        summary. Raises `InvalidArgumentError` for bad knobs (named as in the request)."""
        s = self._settings
        o = options
        v = Violations()
        if o.max_input_tokens < 0:
            v.add("max_input_tokens", "must not be negative")
        if not 0 <= o.compact_ratio <= 1:
            v.add("compact_ratio", "must be in (0, 1]; 0 means the default 0.7")
        if o.reserve_tokens < 0:
            v.add("reserve_tokens", "must not be negative")
        if o.write_memories and not o.scope.session_id:
            v.add("scope.session_id", "is required when write_memories is set")
        self._check_summary_knobs(v, o.max_summary_tokens, o.summarizer)
        check_scope(v, "scope", o.scope, self._limits)
        window = o.max_input_tokens or s.max_input_tokens
        threshold = int(window * (o.compact_ratio or s.compact_ratio) * s.safety_factor)
        if o.reserve_tokens >= threshold > 0:
            v.add("reserve_tokens", f"must be below the compaction threshold ({threshold} tokens)")
        v.raise_if_any()
        counter = self._counter(workspace, o.encoding)
        self._language(o.language, ())  # validated before anything is written
        truncated = 0
        current = list(messages)
        if not o.skip_tool_result_compaction:
            tools = await self.compact_tool_results(
                workspace,
                current,
                limits=o.tool_result_limits or self.default_tool_limits(),
                scope=o.scope,
                limits_field="tool_result_limits",
            )
            current, truncated = tools.messages, tools.truncated_count
        split = await self._split(
            counter=counter,
            messages=current,
            system_prompt=o.system_prompt,
            previous_summary=o.previous_summary,
            threshold=threshold,
            reserve=o.reserve_tokens or self._default_reserve(window, threshold),
        )
        if not (split.needs_compaction and split.keep_from > 0 and split.valid):
            return Prepared(current, o.previous_summary, split, counter.encoding, None, truncated, [])
        older, kept = current[: split.keep_from], current[split.keep_from :]
        outcome = await self.compact_messages(
            workspace,
            older,
            previous_summary=o.previous_summary,
            language=o.language,
            # The summary shares the window too: by default at most 10% of it and a quarter
            # of the threshold, so summary + reserve stay under the threshold.
            max_summary_tokens=o.max_summary_tokens
            or max(MIN_SUMMARY_TOKENS, min(s.max_summary_tokens, int(window * 0.1), threshold // 4)),
            summarizer=o.summarizer,
            encoding=counter.encoding,
        )  # no scope: the transcript is marked only once everything else has succeeded
        if not outcome.compacted:
            return Prepared(current, o.previous_summary, split, counter.encoding, outcome, truncated, [])
        memories: list[Memory] = []
        if o.write_memories:
            # A retried call (same span, same summary) replays the first one's memories.
            key = hashlib.sha256(
                json.dumps([o.scope.session_id, [m.id for m in with_content_ids(older)], outcome.summary]).encode()
            ).hexdigest()[:40]
            written = await self.summarize_session(
                principal,
                workspace,
                o.scope,
                older,
                summary=outcome.summary,
                language=outcome.language,
                clip=True,
                request_id=f"prepare-context:{key}",
            )
            memories = written.memories
        if o.scope.session_id:
            ids = await self.record_transcript(workspace, o.scope, older)
            outcome = dataclasses.replace(outcome, transcript_message_ids=tuple(ids))
        return Prepared(kept, outcome.summary, split, counter.encoding, outcome, truncated, memories)

    # -- transcripts -----------------------------------------------------------------
    async def transcript(
        self, workspace: Workspace, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[TranscriptEntry], str]:
        """One page of a session's transcript, oldest first, and the next page token
        ("" on the last page). Raises `InvalidArgumentError` (session_id, page_size,
        page_token)."""
        v = Violations()
        if not session_id:
            v.add("session_id", "must not be empty")
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

    # -- session memories ---------------------------------------------------------------
    async def summarize_session(
        self,
        principal: Principal,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ContextMessage],
        *,
        summary: str = "",
        language: str = "",
        summarizer: SummarizerChoice = SummarizerChoice.AUTO,
        request_id: str = "",
        clip: bool = False,
    ) -> SessionMemories:
        """Write a session span as memories through the write-back path: an EPISODIC
        session summary (the given one, else the LLM's, else extractive — an LLM failure
        falls back to extractive and says so) plus, with an LLM, the USER / PROCEDURAL /
        TOOL memories it extracts (ReMe's summary_memory). Raises `InvalidArgumentError`
        (scope.session_id, messages, summary, request_id) and what `WriteBackService.add`
        raises (quota, embedding mismatch)."""
        v = Violations()
        check_scope(v, "scope", scope, self._limits)
        check_request_id(v, "request_id", request_id, self._limits)
        if not scope.session_id:
            v.add("scope.session_id", "must not be empty")
        if not messages and not summary.strip():
            v.add("messages", "must hold messages when no summary is given")
        if not clip:  # a summary the caller sent; one made here is clipped to fit instead
            check_text(v, "summary", summary, self._limits.max_content_bytes)
        v.raise_if_any()
        lang = self._language(language, messages)
        method = "given"
        if not summary.strip():
            outcome = await self.compact_messages(workspace, messages, language=lang, summarizer=summarizer)
            if not outcome.compacted and outcome.failure.startswith(SummaryMethod.LLM):
                failure = outcome.failure  # the LLM failed: an honest extract rather than nothing
                outcome = await self.compact_messages(
                    workspace, messages, language=lang, summarizer=SummarizerChoice.EXTRACTIVE
                )
                method = f"extractive ({failure})"
            else:
                method = str(outcome.method)
            if not outcome.compacted:
                raise FailedPreconditionError(f"no summary could be made: {outcome.failure}")
            summary = outcome.summary
        clipped = clip_utf8(summary, self._limits.max_content_bytes)
        extracted: list[ExtractedMemory] = []
        extraction = "none: no LLM configured"
        if self._llm is not None and messages and summarizer is not SummarizerChoice.EXTRACTIVE:
            try:
                extracted = await self._llm.extract_memories(messages, summary=summary, language=lang)
                extraction = "llm"
            except SummarizerError as error:
                extraction = f"none: {error}"
        items = [self._summary_memory(scope, messages, clipped, method, clipped=len(clipped) < len(summary))]
        items += [self._extracted_memory(scope, messages, e) for e in extracted]
        stored = await self._writer.add(principal, workspace, items, request_id)
        return SessionMemories(stored, method, extraction)

    @staticmethod
    def _provenance(scope: Scope, messages: Sequence[ContextMessage]) -> Provenance:
        return Provenance(session_id=scope.session_id, message_ids=tuple(m.id for m in messages if m.id))

    def _summary_memory(
        self, scope: Scope, messages: Sequence[ContextMessage], summary: str, method: str, *, clipped: bool
    ) -> NewMemory:
        times = sorted(m.created_at for m in messages if m.created_at is not None)
        span = f" from {times[0]:%Y-%m-%d %H:%M} to {times[-1]:%Y-%m-%d %H:%M} UTC" if times else ""
        return NewMemory(
            content=summary,
            scope=scope,
            type=MemoryType.EPISODIC,
            name=f"Session {scope.session_id} summary"[: self._limits.max_name_bytes],
            description=f"Summary of {len(messages)} messages{span}"[: self._limits.max_description_bytes],
            metadata={
                "kind": "session_summary",
                "summary_method": method,
                "message_count": len(messages),
                "clipped": clipped,  # the summary was longer than limits.max_content_bytes
            },
            valid_from=times[0] if times else None,
            provenance=self._provenance(scope, messages),
        )

    def _extracted_memory(self, scope: Scope, messages: Sequence[ContextMessage], item: ExtractedMemory) -> NewMemory:
        return NewMemory(
            content=item.content[: self._limits.max_content_bytes // 4],
            scope=scope,
            type=MemoryType(item.type),
            name=item.name[: self._limits.max_name_bytes // 4],
            description=item.description[: self._limits.max_description_bytes // 4],
            metadata={"kind": "extracted", "extracted_by": "llm"},
            provenance=self._provenance(scope, messages),
        )


def clip_utf8(text: str, max_bytes: int) -> str:
    """*text* cut to at most *max_bytes* UTF-8 bytes, on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")


CONTENT_ID_PREFIX = "~"


def with_content_ids(messages: Sequence[ContextMessage]) -> list[ContextMessage]:
    """*messages* with every empty id replaced by a content id: "~" + 16 hex digits of the
    SHA-256 of the whole span (every message's role, name, time, blocks and id) and the
    message's position in it. Sending the same span again (a retry, a lost reply) maps
    to the same transcript rows; another span never merges with it, so equal words said
    twice stay two messages. Messages that should match across different spans need
    client ids."""
    span = hashlib.sha256()
    for m in messages:
        body = [m.id, m.role.value, m.name, m.created_at.isoformat() if m.created_at else "", blocks_to_json(m.blocks)]
        span.update(json.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        span.update(b"\x1e")
    prefix = span.hexdigest()
    out: list[ContextMessage] = []
    for i, m in enumerate(messages):
        if m.id:
            out.append(m)
            continue
        digest = hashlib.sha256(f"{prefix}:{i}".encode()).hexdigest()[:16]
        out.append(dataclasses.replace(m, id=CONTENT_ID_PREFIX + digest))
    return out
