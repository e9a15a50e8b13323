"""The turns returned around a search hit (SearchMemoriesRequest.context_turns), bounded in
tokens: nearest first, the earlier turn on a tie, until the next would pass the bound;
returned in transcript order. A turn that does not fit in what is left is skipped and a
farther, shorter one may still be taken."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memplane.server.storage.search import ContextTurn

DEFAULT_CONTEXT_TOKENS = 500
"""Tokens of one hit's context when the request leaves context_max_tokens 0."""


@dataclass(frozen=True)
class CountedTurn:
    """A context turn with its token count."""

    turn: ContextTurn
    tokens: int


def bound_context(turns: Sequence[ContextTurn], max_tokens: int, count: Callable[[str], int]) -> list[CountedTurn]:
    """*turns* (any order) within *max_tokens* in all, counted by *count*: taken nearest
    first (|offset|, the earlier on a tie) while they fit, a turn that does not fit skipped;
    returned by offset."""
    kept: list[CountedTurn] = []
    used = 0
    for turn in sorted(turns, key=lambda t: (abs(t.offset), t.offset)):
        tokens = count(turn.content)
        if used + tokens <= max_tokens:
            kept.append(CountedTurn(turn, tokens))
            used += tokens
    return sorted(kept, key=lambda c: c.turn.offset)
