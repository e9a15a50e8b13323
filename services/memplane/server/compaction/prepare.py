"""PrepareContext: ReMe's pre_reasoning_hook in one call, the one orchestration of
compaction's parts (ReMeLight's check_context, compact_memory, compact_tool_result,
summary_memory). The gRPC edge calls each part directly for its own RPC: `check` counts
and splits, `offload` cuts tool outputs, `compactor` summarises, `session_memory` writes
memories, `transcript` records and pages the transcript.

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

from memplane.domain.context import (
    CompactionOutcome,
    ContextMessage,
    ContextSplit,
    SummarizerChoice,
    ToolResultBlock,
    ToolResultLimits,
)
from memplane.domain.models import Memory, Principal, Scope, Workspace
from memplane.server.compaction import tool_output
from memplane.server.compaction.check import ContextChecker, fixed_tokens
from memplane.server.compaction.compactor import MIN_SUMMARY_TOKENS, MessageCompactor
from memplane.server.compaction.content_ids import with_content_ids
from memplane.server.compaction.knobs import NO_SCOPE, counter_for, language_for
from memplane.server.compaction.offload import ToolResultOffloader
from memplane.server.compaction.session_memory import SessionSummarizer
from memplane.server.compaction.transcript import SessionTranscript
from memplane.server.settings import CompactionSettings, LimitsSettings
from memplane.server.validation import Violations, check_scope

__all__ = ["ContextPreparer", "PrepareOptions", "Prepared"]

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


class ContextPreparer:
    """The pre-reasoning hook over the parts it is given (built by the composition root)."""

    def __init__(
        self,
        *,
        checker: ContextChecker,
        offloader: ToolResultOffloader,
        compactor: MessageCompactor,
        sessions: SessionSummarizer,
        transcript: SessionTranscript,
        settings: CompactionSettings,
        limits: LimitsSettings,
    ) -> None:
        self._checker = checker
        self._offloader = offloader
        self._compactor = compactor
        self._sessions = sessions
        self._transcript = transcript
        self._settings = settings
        self._limits = limits

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
        fixed = fixed_tokens(counter, o.system_prompt, o.previous_summary)
        if not o.skip_tool_result_compaction:
            tools = await self._offloader.compact_tool_results(
                workspace,
                current,
                limits=self._window_tool_limits(
                    o.tool_result_limits or self._offloader.default_limits(),
                    current,
                    window,
                    sum(fixed),
                ),
                scope=o.scope,
                limits_field="tool_result_limits",
            )
            current, truncated = tools.messages, tools.truncated_count
        split = await self._checker.split(
            counter=counter,
            messages=current,
            fixed_tokens=fixed,
            threshold=threshold,
            reserve=o.reserve_tokens or self._checker.default_reserve(window, threshold),
        )
        if not (split.needs_compaction and split.keep_from > 0 and split.valid):
            return Prepared(current, o.previous_summary, split, counter.encoding, None, truncated, [])
        older, kept = current[: split.keep_from], current[split.keep_from :]
        older_as_sent = as_sent[: split.keep_from]  # tool compaction keeps one message per message
        outcome = await self._compactor.compact_messages(
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
            written = await self._sessions.summarize_session(
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
            ids = await self._transcript.record(workspace, o.scope, older_as_sent)
            outcome = dataclasses.replace(outcome, transcript_message_ids=tuple(ids))
        return Prepared(kept, outcome.summary, split, counter.encoding, outcome, truncated, memories)
