"""Compacting messages into the structured summary, never losing one: a failed
summariser (error, timeout, answer without the sections or far over budget) returns the
previous summary unchanged with `compacted=False`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from memplane.domain.context import CompactionOutcome, ContextMessage, SummarizerChoice, SummaryMethod
from memplane.domain.models import Scope, Workspace
from memplane.errors import FailedPreconditionError
from memplane.server.compaction.extractive import ExtractiveSummarizer
from memplane.server.compaction.knobs import NO_SCOPE, count_messages, counter_for, language_for
from memplane.server.compaction.llm import LLMSummarizer, SummarizerError
from memplane.server.compaction.transcript import SessionTranscript
from memplane.server.settings import CompactionSettings, LimitsSettings
from memplane.server.validation import Violations, check_scope
from memplane.text.tokens import TokenCounter

_log = logging.getLogger(__name__)

# Smallest summary budget a request may set: room for a heading and a few items.
MIN_SUMMARY_TOKENS = 64
# An answer over this many times the budget is refused (LLMs overshoot a little; a
# summary several times its budget defeats compaction).
OVER_BUDGET_FACTOR = 2


class MessageCompactor:
    """Summarises messages with the LLM (when configured and chosen) or extractively."""

    def __init__(
        self,
        *,
        extractive: ExtractiveSummarizer,
        llm: LLMSummarizer | None,
        transcript: SessionTranscript,
        settings: CompactionSettings,
        limits: LimitsSettings,
    ) -> None:
        self._extractive = extractive
        self._llm = llm
        self._transcript = transcript
        self._settings = settings
        self._limits = limits

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
        self.check_summary_knobs(v, max_summary_tokens, summarizer)
        check_scope(v, "scope", scope, self._limits)
        v.raise_if_any()
        counter = counter_for(workspace, encoding)
        lang = language_for(language, messages)
        budget = max_summary_tokens or self._settings.max_summary_tokens
        input_tokens = sum(await count_messages(counter, messages))
        llm = self._llm if summarizer is not SummarizerChoice.EXTRACTIVE else None
        method = SummaryMethod.LLM if llm is not None else SummaryMethod.EXTRACTIVE
        try:
            if llm is not None:
                summary = await llm.summarize(
                    messages,
                    previous_summary=previous_summary,
                    language=lang,
                    max_summary_tokens=budget,
                    workspace=workspace,
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
            return _kept(previous_summary, counter, input_tokens, lang, f"{method} summariser failed: {error}")
        except Exception as error:  # a summary is never lost, whatever went wrong
            _log.exception("summariser (%s) raised; previous summary kept", method)
            return _kept(
                previous_summary, counter, input_tokens, lang, f"{method} summariser failed: {type(error).__name__}"
            )
        summary_tokens = counter.count_text(summary)
        problem = _unusable(summary, summary_tokens, budget)
        if problem:
            _log.warning("summariser (%s) answer refused, previous summary kept: %s", method, problem)
            return _kept(previous_summary, counter, input_tokens, lang, f"{method} summariser failed: {problem}")
        ids = await self._transcript.record(workspace, scope, messages) if scope.session_id else []
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

    def check_summary_knobs(self, v: Violations, max_summary_tokens: int, summarizer: SummarizerChoice) -> None:
        """Budget and summariser choice, checked before anything is written. Raises
        `FailedPreconditionError` when the LLM is asked for and none is configured."""
        if max_summary_tokens < 0 or 0 < max_summary_tokens < MIN_SUMMARY_TOKENS:
            v.add("max_summary_tokens", f"must be 0 (the default) or at least {MIN_SUMMARY_TOKENS}")
        if summarizer is SummarizerChoice.LLM and self._llm is None:
            raise FailedPreconditionError("no LLM is configured on this server (set MEMPLANE_LLM__BASE_URL)")


def _unusable(summary: str, summary_tokens: int, budget: int) -> str:
    """Why a summariser's answer must not replace the running summary ("" if usable):
    nothing summarised (an extract without a single sentence), or more than twice the
    budget (a context "compacted" into something larger than asked for)."""
    if not any(line.startswith("- ") and line.strip("- ").strip() for line in summary.splitlines()):
        return "the summary holds no content"
    if summary_tokens > OVER_BUDGET_FACTOR * budget:
        return f"the summary has {summary_tokens} tokens, over {OVER_BUDGET_FACTOR}x the budget of {budget}"
    return ""


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
