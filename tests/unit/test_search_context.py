"""The turns returned around a hit (memplane.server.retrieval.context.bound_context): nearest
first within the token bound, the earlier on a tie, returned in transcript order."""

from __future__ import annotations

from memplane.server.retrieval.context import bound_context
from memplane.server.storage.search import ContextTurn


def turn(offset: int, words: int) -> ContextTurn:
    return ContextTurn(offset, f"D1:{5 + offset}", "Ana", " ".join(["w"] * words))


def words(text: str) -> int:
    return len(text.split())


def test_all_turns_fit_in_transcript_order() -> None:
    kept = bound_context([turn(1, 3), turn(-2, 3), turn(-1, 3), turn(2, 3)], 100, words)
    assert [c.turn.offset for c in kept] == [-2, -1, 1, 2]
    assert [c.tokens for c in kept] == [3, 3, 3, 3]


def test_nearest_first_the_earlier_on_a_tie_until_the_bound() -> None:
    kept = bound_context([turn(-2, 4), turn(-1, 4), turn(1, 4), turn(2, 4)], 12, words)
    assert [c.turn.offset for c in kept] == [-2, -1, 1]  # -1, then 1, then -2 (before 2)


def test_a_turn_too_long_is_skipped_and_a_farther_short_one_kept() -> None:
    kept = bound_context([turn(-1, 50), turn(1, 2), turn(2, 2)], 10, words)
    assert [c.turn.offset for c in kept] == [1, 2]
    assert bound_context([turn(-1, 50)], 10, words) == []
    assert bound_context([], 10, words) == []
