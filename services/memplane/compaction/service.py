"""CompactionService: ReMe's context tools (ReMeLight's check_context, compact_memory,
compact_tool_result, pre_reasoning_hook, summary_memory) for every agent of a workspace.

This module is the service's one entry point: the context check and the pre-reasoning
hook that chains the parts; the parts live in their own modules (`offload` cuts tool
outputs, `compactor` summarises, `session_memory` writes memories, `transcript` records
and pages the transcript).

The loss-proof rules, each enforced by those parts:
- a failed summariser (error, timeout, answer without the sections) returns the previous
  summary unchanged with `compacted=False`; the caller keeps its messages (`compactor`);
- a cut tool output is stored whole before the cut message is returned; an output cut
  before is never stored again (`offload`);
- compacted messages are recorded in the session transcript and only marked compacted
  (`transcript`); `prepare_context` records them only once everything else succeeded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from memplane.compaction import tool_output
from memplane.compaction.compactor import MIN_SUMMARY_TOKENS, MessageCompactor
from memplane.compaction.content_ids import with_content_ids
from memplane.compaction.extractive import ExtractiveSummarizer
from memplane.compaction.knobs import NO_SCOPE, count_messages, counter_for, language_for
from memplane.compaction.llm import LLMSummarizer
from memplane.compaction.offload import ToolCompaction, ToolResultOffloader, ToolResultSlice
from memplane.compaction.session_memory import MemoryWriter, SessionMemories, SessionSummarizer
from memplane.compaction.split import split_context
from memplane.compaction.transcript import SessionTranscript
from memplane.domain.context import (
    CompactionOutcome,
    ContextMessage,
    ContextSplit,
    SummarizerChoice,
    ToolResultBlock,
    ToolResultLimits,
)
from memplane.domain.models import Memory, Principal, Scope, Workspace
from memplane.domain.validation import Violations, check_scope
from memplane.settings import CompactionSettings, LimitsSettings
from memplane.storage.blobs import ToolResultBlobStore
from memplane.storage.database import Database
from memplane.storage.transcripts import TranscriptEntry, TranscriptStore
from memplane.text.tokens import TokenCounter

__all__ = ["CompactionService", "PrepareOptions", "Prepared"]

MIN_TOOL_OUTPUT_BYTES = 256
"""The least of each recent tool output PrepareContext keeps in the context, however full
the window is: its first lines and the reference to the rest (a marker alone tells the
model nothing it can act on)."""


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
        self._settings = settings
        self._limits = limits
        self._transcript = SessionTranscript(db=db, transcripts=transcripts, limits=limits)
        self._offloader = ToolResultOffloader(db=db, blobs=blobs, settings=settings, limits=limits)
        self._compactor = MessageCompactor(
            extractive=extractive,
            llm=llm,
            transcript=self._transcript,
            settings=settings,
            limits=limits,
        )
        self._sessions = SessionSummarizer(compactor=self._compactor, llm=llm, writer=writer, limits=limits)

    # -- helpers --------------------------------------------------------------------
    def _default_reserve(self, window_tokens: float, threshold_tokens: int) -> int:
        """ReMe's reserve (10,000 tokens), but at most `reserve_ratio` (10%) of the model's
        window (CoPaw's memory_reserve_ratio) and at most half the threshold, so a small
        window or a small compact_ratio still compacts to under the threshold; >= 1."""
        s = self._settings
        return max(1, min(s.reserve_tokens, int(window_tokens * s.reserve_ratio), threshold_tokens // 2))

    def _window_tool_limits(
        self, limits: ToolResultLimits, messages: Sequence[ContextMessage], window_tokens: int, fixed_tokens: int
    ) -> ToolResultLimits:
        """*limits* lowered so that the recent tool outputs (the current turn's and the
        last messages', which compaction cannot take out of the context) fit together in
        `tool_result_window_share` of the window less *fixed_tokens* (the system prompt and
        previous summary, which stay whatever is compacted): that many tokens read as
        bytes, shared equally by the recent outputs (B bytes are at most B tokens in a
        byte-level BPE: every token stands for at least one byte), and never below
        MIN_TOOL_OUTPUT_BYTES each (a window the fixed parts already fill is reported by
        the split's problems, not hidden by cutting outputs to nothing). The old limit
        never exceeds the recent one. Unchanged when the limits already fit (ReMe's 100 KB at a 128,000 window) or
        no recent message holds a tool output (older ones are compacted away when the
        context is over the threshold)."""
        per_message = tool_output.plan_limits(
            messages,
            recent_max_bytes=limits.recent_max_bytes,
            old_max_bytes=limits.old_max_bytes,
            keep_last_messages=limits.keep_last_messages,
        )
        recent = sum(
            isinstance(block, ToolResultBlock)
            for message, limit in zip(messages, per_message, strict=True)
            if limit == limits.recent_max_bytes
            for block in message.blocks
        )
        budget = int(window_tokens * self._settings.tool_result_window_share) - fixed_tokens
        share = max(MIN_TOOL_OUTPUT_BYTES, budget // max(1, recent))
        if recent == 0 or limits.recent_max_bytes <= share:
            return limits  # older outputs are bounded by compaction, which summarises them away
        return dataclasses.replace(limits, recent_max_bytes=share, old_max_bytes=min(limits.old_max_bytes, share))

    def default_tool_limits(self) -> ToolResultLimits:
        """The server's tool-output limits."""
        return self._offloader.default_limits()

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
        counter = counter_for(workspace, encoding)
        split = await self._split(
            counter=counter,
            messages=messages,
            fixed_tokens=_fixed_tokens(counter, system_prompt, previous_summary),
            threshold=threshold,
            reserve=reserve_tokens or self._default_reserve(threshold / (s.compact_ratio * s.safety_factor), threshold),
        )
        return split, counter.encoding

    async def _split(
        self,
        *,
        counter: TokenCounter,
        messages: Sequence[ContextMessage],
        fixed_tokens: tuple[int, int],
        threshold: int,
        reserve: int,
    ) -> ContextSplit:
        """The split of *messages* beside the system prompt's and previous summary's
        token counts *fixed_tokens* (counted once per request by `_fixed_tokens`)."""
        system_tokens, summary_tokens = fixed_tokens
        return split_context(
            messages,
            await count_messages(counter, messages),
            system_prompt_tokens=system_tokens,
            previous_summary_tokens=summary_tokens,
            threshold_tokens=threshold,
            reserve_tokens=reserve,
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
        self._compactor.check_summary_knobs(v, o.max_summary_tokens, o.summarizer)
        check_scope(v, "scope", o.scope, self._limits)
        window = o.max_input_tokens or s.max_input_tokens
        threshold = int(window * (o.compact_ratio or s.compact_ratio) * s.safety_factor)
        if o.reserve_tokens >= threshold > 0:
            v.add("reserve_tokens", f"must be below the compaction threshold ({threshold} tokens)")
        v.raise_if_any()
        counter = counter_for(workspace, o.encoding)
        language_for(o.language, ())  # validated before anything is written
        truncated = 0
        current = list(messages)
        # Ids fixed on the messages as sent: the transcript records them uncut (nothing is
        # destroyed when a blob expires), and a retry maps to the same rows whatever the
        # cut outputs' markers say by then.
        as_sent = with_content_ids(current)
        fixed = _fixed_tokens(counter, o.system_prompt, o.previous_summary)
        if not o.skip_tool_result_compaction:
            tools = await self.compact_tool_results(
                workspace,
                current,
                limits=self._window_tool_limits(
                    o.tool_result_limits or self.default_tool_limits(),
                    current,
                    window,
                    sum(fixed),
                ),
                scope=o.scope,
                limits_field="tool_result_limits",
            )
            current, truncated = tools.messages, tools.truncated_count
        split = await self._split(
            counter=counter,
            messages=current,
            fixed_tokens=fixed,
            threshold=threshold,
            reserve=o.reserve_tokens or self._default_reserve(window, threshold),
        )
        if not (split.needs_compaction and split.keep_from > 0 and split.valid):
            return Prepared(current, o.previous_summary, split, counter.encoding, None, truncated, [])
        older, kept = current[: split.keep_from], current[split.keep_from :]
        older_as_sent = as_sent[: split.keep_from]  # tool compaction keeps one message per message
        outcome = await self.compact_messages(
            workspace,
            older,
            previous_summary=o.previous_summary,
            language=o.language,
            # The summary shares the window too: by default at most reserve_ratio (10%) of
            # it and a quarter of the threshold, so summary + reserve stay under the threshold.
            max_summary_tokens=o.max_summary_tokens
            or max(MIN_SUMMARY_TOKENS, min(s.max_summary_tokens, int(window * s.reserve_ratio), threshold // 4)),
            summarizer=o.summarizer,
            encoding=counter.encoding,
        )  # no scope: the transcript is marked only once everything else has succeeded
        if not outcome.compacted:
            return Prepared(current, o.previous_summary, split, counter.encoding, outcome, truncated, [])
        memories: list[Memory] = []
        if o.write_memories:
            # A retried call (same span, same summary) replays the first one's memories.
            key = hashlib.sha256(
                json.dumps([o.scope.session_id, [m.id for m in older_as_sent], outcome.summary]).encode()
            ).hexdigest()[:40]
            written = await self.summarize_session(
                principal,
                workspace,
                o.scope,
                older_as_sent,
                summary=outcome.summary,
                language=outcome.language,
                clip=True,
                request_id=f"prepare-context:{key}",
            )
            memories = written.memories
        if o.scope.session_id:
            ids = await self.record_transcript(workspace, o.scope, older_as_sent)
            outcome = dataclasses.replace(outcome, transcript_message_ids=tuple(ids))
        return Prepared(kept, outcome.summary, split, counter.encoding, outcome, truncated, memories)

    # -- the parts, one call each ----------------------------------------------------
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
        """Summarise *messages*, never losing *previous_summary*; see
        `MessageCompactor.compact_messages`."""
        return await self._compactor.compact_messages(
            workspace,
            messages,
            previous_summary=previous_summary,
            language=language,
            max_summary_tokens=max_summary_tokens,
            summarizer=summarizer,
            scope=scope,
            encoding=encoding,
        )

    async def record_transcript(
        self, workspace: Workspace, scope: Scope, messages: Sequence[ContextMessage]
    ) -> list[str]:
        """Record compacted *messages* in the session transcript; see `SessionTranscript.record`."""
        return await self._transcript.record(workspace, scope, messages)

    async def transcript(
        self, workspace: Workspace, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[TranscriptEntry], str]:
        """One page of a session's transcript; see `SessionTranscript.page`."""
        return await self._transcript.page(workspace, session_id, page_size=page_size, page_token=page_token)

    async def compact_tool_results(
        self,
        workspace: Workspace,
        messages: Sequence[ContextMessage],
        *,
        limits: ToolResultLimits | None = None,
        scope: Scope = NO_SCOPE,
        limits_field: str = "limits",
    ) -> ToolCompaction:
        """Cut tool outputs over their byte limit, each stored whole first; see
        `ToolResultOffloader.compact_tool_results`."""
        return await self._offloader.compact_tool_results(
            workspace, messages, limits=limits, scope=scope, limits_field=limits_field
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
        """Part of a stored tool output; see `ToolResultOffloader.read_tool_result`."""
        return await self._offloader.read_tool_result(
            workspace,
            ref,
            start_line=start_line,
            start_column=start_column,
            line_count=line_count,
            max_bytes=max_bytes,
        )

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
        """Write a session span as memories; see `SessionSummarizer.summarize_session`."""
        return await self._sessions.summarize_session(
            principal,
            workspace,
            scope,
            messages,
            summary=summary,
            language=language,
            summarizer=summarizer,
            request_id=request_id,
            clip=clip,
        )


def _fixed_tokens(counter: TokenCounter, system_prompt: str, previous_summary: str) -> tuple[int, int]:
    """Tokens of the system prompt and of the previous summary: the parts of a context
    that stay whatever is compacted."""
    system_tokens, summary_tokens = counter.count_texts([system_prompt, previous_summary])
    return system_tokens, summary_tokens
