"""The context check (ReMe's check_context): a context's token counts and its split into
the messages to compact and the messages to keep, against a threshold and a reserve
(`memplane.server.compaction.split.split_context` decides where the split falls)."""

from __future__ import annotations

from collections.abc import Sequence

from memplane.domain.context import ContextMessage, ContextSplit
from memplane.domain.models import Workspace
from memplane.server.compaction.knobs import count_messages, counter_for
from memplane.server.compaction.split import split_context
from memplane.server.settings import CompactionSettings
from memplane.server.validation import Violations
from memplane.text.tokens import TokenCounter


class ContextChecker:
    """Counts and splits contexts with one server's compaction defaults."""

    def __init__(self, *, settings: CompactionSettings) -> None:
        self._settings = settings

    def default_reserve(self, window_tokens: float, threshold_tokens: int) -> int:
        """ReMe's reserve (10,000 tokens), but at most `reserve_ratio` (10%) of the model's
        window (CoPaw's memory_reserve_ratio) and at most half the threshold, so a small
        window or a small compact_ratio still compacts to under the threshold; >= 1."""
        s = self._settings
        return max(1, min(s.reserve_tokens, int(window_tokens * s.reserve_ratio), threshold_tokens // 2))

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
        split = await self.split(
            counter=counter,
            messages=messages,
            fixed_tokens=fixed_tokens(counter, system_prompt, previous_summary),
            threshold=threshold,
            reserve=reserve_tokens or self.default_reserve(threshold / (s.compact_ratio * s.safety_factor), threshold),
        )
        return split, counter.encoding

    @staticmethod
    async def split(
        *,
        counter: TokenCounter,
        messages: Sequence[ContextMessage],
        fixed_tokens: tuple[int, int],
        threshold: int,
        reserve: int,
    ) -> ContextSplit:
        """The split of *messages* beside the system prompt's and previous summary's
        token counts *fixed_tokens* (counted once per request by `fixed_tokens`)."""
        system_tokens, summary_tokens = fixed_tokens
        return split_context(
            messages,
            await count_messages(counter, messages),
            system_prompt_tokens=system_tokens,
            previous_summary_tokens=summary_tokens,
            threshold_tokens=threshold,
            reserve_tokens=reserve,
        )


def fixed_tokens(counter: TokenCounter, system_prompt: str, previous_summary: str) -> tuple[int, int]:
    """Tokens of the system prompt and of the previous summary: the parts of a context
    that stay whatever is compacted."""
    system_tokens, summary_tokens = counter.count_texts([system_prompt, previous_summary])
    return system_tokens, summary_tokens
