"""Where CheckContext splits a context (memplane.server.compaction.split, ReMe's check_context).

Token counts are given directly, so each case controls exactly where the reserve walk
stops; the counter itself is tested elsewhere."""

from __future__ import annotations

import time

import pytest

from memplane.domain.context import ContextMessage, ContextSplit, TextBlock, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole
from memplane.server.compaction.split import split_context


# -- message builders ----------------------------------------------------------------
def user(text: str = "a question") -> ContextMessage:
    return ContextMessage(MessageRole.USER, (TextBlock(text),))


def assistant(text: str = "an answer") -> ContextMessage:
    return ContextMessage(MessageRole.ASSISTANT, (TextBlock(text),))


def call(*ids: str, text: str = "") -> ContextMessage:
    """An assistant message making one tool call per id (AgentScope puts several in one)."""
    blocks: tuple[TextBlock | ToolUseBlock, ...] = (TextBlock(text),) if text else ()
    return ContextMessage(MessageRole.ASSISTANT, blocks + tuple(ToolUseBlock(i, "grep", '{"q": "x"}') for i in ids))


def result(tool_use_id: str, output: str = "line 1\nline 2") -> ContextMessage:
    return ContextMessage(MessageRole.TOOL, (ToolResultBlock(tool_use_id, output, name="grep"),))


def split(
    messages: list[ContextMessage],
    tokens: list[int],
    *,
    threshold: int,
    reserve: int,
    system: int = 0,
    summary: int = 0,
) -> ContextSplit:
    return split_context(
        messages,
        tokens,
        system_prompt_tokens=system,
        previous_summary_tokens=summary,
        threshold_tokens=threshold,
        reserve_tokens=reserve,
    )


def alternating(n: int, *, first: MessageRole = MessageRole.USER) -> list[ContextMessage]:
    """n plain turns alternating user/assistant, starting with *first*."""
    other = MessageRole.ASSISTANT if first == MessageRole.USER else MessageRole.USER
    return [
        user(f"u{i}") if (first if i % 2 == 0 else other) == MessageRole.USER else assistant(f"a{i}") for i in range(n)
    ]


# -- threshold -----------------------------------------------------------------------
def test_total_at_threshold_needs_no_compaction() -> None:
    msgs = alternating(4)
    out = split(msgs, [100, 200, 300, 400], threshold=1_100, reserve=50, system=60, summary=40)
    assert out.total_tokens == 1_100  # system + summary + messages
    assert not out.needs_compaction  # compaction only when the total EXCEEDS the threshold
    assert out.keep_from == 0
    assert out.kept_tokens == 1_000
    assert not out.over_reserve  # kept > reserve, but no compaction is needed
    assert out.valid
    assert out.problems == ()
    assert out.message_tokens == (100, 200, 300, 400)
    assert out.threshold_tokens == 1_100
    assert (out.system_prompt_tokens, out.previous_summary_tokens) == (60, 40)


def test_one_token_over_threshold_needs_compaction() -> None:
    out = split(alternating(4), [100, 200, 300, 400], threshold=1_099, reserve=1_000, system=60, summary=40)
    assert out.needs_compaction
    assert out.total_tokens == 1_100


# -- the reserve walk ----------------------------------------------------------------
def test_reserve_walk_keeps_newest_messages_that_fit() -> None:
    msgs = alternating(10)  # u a u a ... u a
    out = split(msgs, [100] * 10, threshold=500, reserve=250)
    # 9 and 8 fit (200), 7 would make 300 > 250: 0..7 are compacted
    assert out.needs_compaction
    assert out.keep_from == 8
    assert out.kept_tokens == 200
    assert not out.over_reserve
    assert out.valid
    assert out.problems == ()


def test_reserve_walk_keeps_a_message_that_exactly_fills_the_reserve() -> None:
    msgs = [user(), assistant(), user(), assistant(), user(), assistant()]
    out = split(msgs, [500, 500, 300, 100, 50, 50], threshold=1_000, reserve=500)
    assert out.keep_from == 2  # 50 + 50 + 100 + 300 == 500 <= reserve
    assert out.kept_tokens == 500
    assert not out.over_reserve


def test_first_overflowing_message_is_compacted_even_if_older_ones_are_small() -> None:
    msgs = [user(), assistant(), assistant("a long essay"), user(), assistant()]
    out = split(msgs, [1, 1, 5_000, 10, 10], threshold=100, reserve=1_000)
    assert out.keep_from == 3  # messages[2] overflows: it and everything before it go
    assert out.kept_tokens == 20
    assert out.problems == ()


def test_newest_user_message_alone_over_reserve_is_kept() -> None:
    msgs = [user(), assistant(), user(), assistant(), user("a huge pasted log")]
    out = split(msgs, [100, 100, 100, 100, 9_000], threshold=1_000, reserve=2_000)
    assert out.needs_compaction
    assert out.keep_from == 4
    assert out.kept_tokens == 9_000
    assert out.over_reserve
    assert out.valid
    assert any("newest user message messages[4]" in p for p in out.problems)


def test_current_turn_after_the_newest_user_message_is_kept_whole() -> None:
    msgs = [user(), assistant(), user("q"), call("c1"), result("c1"), call("c2"), result("c2")]
    # the tool outputs after the question fit, the question itself does not
    out = split(msgs, [50, 50, 3_000, 20, 400, 20, 400], threshold=1_000, reserve=1_000)
    assert out.keep_from == 2
    assert out.kept_tokens == 3_840
    assert out.over_reserve
    assert out.valid


def test_user_message_of_tool_results_only_is_not_the_current_turn() -> None:
    """Anthropic-style clients send tool outputs in user-role messages: the user's
    question before them is the current turn."""
    tool_in_user = ContextMessage(MessageRole.USER, (ToolResultBlock("c2", "out"),))
    msgs = [user(), assistant(), user("question"), call("c1"), result("c1"), assistant("so"), call("c2"), tool_in_user]
    out = split(msgs, [10, 10, 2_000, 10, 10, 10, 10, 10], threshold=100, reserve=30)
    # the walk stops at messages[5]; were messages[7] the current turn, 5 would stay
    assert out.keep_from == 2
    assert any("newest user message messages[2]" in p for p in out.problems)


def test_newest_message_kept_when_there_is_no_user_message() -> None:
    msgs = [assistant("plan"), call("c1"), result("c1", "x" * 100)]
    out = split(msgs, [10, 10, 5_000], threshold=100, reserve=100)
    # result kept although over the reserve, and its tool_use pulled in with it
    assert out.keep_from == 1
    assert out.over_reserve
    assert any("newest message messages[2]" in p for p in out.problems)
    assert any("'c1'" in p for p in out.problems)


# -- C006 and tool pairs -------------------------------------------------------------
def c006(first: MessageRole) -> list[ContextMessage]:
    """30 turns: 1-27 alternating user/assistant (from *first*), 28 an assistant
    tool_use, 29 its tool_result (role tool), 30 the user's new question."""
    return [*alternating(27, first=first), call("call_9"), result("call_9", "a\nb\nc"), user("and now?")]


def test_c006_tool_call_kept_with_its_result_and_the_question() -> None:
    msgs = c006(MessageRole.ASSISTANT)  # turn 27 is an assistant message
    tokens = [300] * 27 + [400, 500, 100]
    out = split(msgs, tokens, threshold=5_000, reserve=700)  # fits turns 29-30 (600) only
    assert out.needs_compaction
    assert out.keep_from == 27  # turns 28-30 (1-based) kept
    assert out.kept_tokens == 1_000
    assert out.over_reserve
    assert out.valid
    assert out.problems == ("kept messages[27] with the tool_use 'call_9' whose tool_result is messages[28]",)


def test_c006_with_a_user_turn_before_the_call_keeps_that_user_turn_too() -> None:
    """Starting with a user, turn 27 is the user message turn 28 replies to: the
    user/assistant rule pulls it in as well (turns 27-30 kept)."""
    msgs = c006(MessageRole.USER)
    assert msgs[26].role == MessageRole.USER
    out = split(msgs, [300] * 27 + [400, 500, 100], threshold=5_000, reserve=700)
    assert out.keep_from == 26
    assert out.kept_tokens == 1_300
    assert out.valid
    assert out.problems == (
        "kept messages[27] with the tool_use 'call_9' whose tool_result is messages[28]",
        "kept the user message messages[26] with the assistant reply messages[27]",
    )


def test_user_assistant_pair_is_not_split() -> None:
    msgs = [user(), assistant(), user(), assistant("long reply"), user("q")]
    out = split(msgs, [100, 100, 300, 200, 50], threshold=500, reserve=400)
    # the walk keeps messages[3:]; messages[3] replies to messages[2]
    assert out.keep_from == 2
    assert out.kept_tokens == 550
    assert out.over_reserve
    assert out.problems == ("kept the user message messages[2] with the assistant reply messages[3]",)


def test_assistant_after_tool_output_may_start_the_kept_part() -> None:
    msgs = [user(), call("c1"), result("c1"), assistant("answer"), user("next")]
    out = split(msgs, [100, 100, 100, 100, 100], threshold=400, reserve=200)
    assert out.keep_from == 3  # messages[2] is a tool message, not a user turn
    assert out.problems == ()


def test_tool_result_before_its_tool_use_across_the_boundary_is_invalid() -> None:
    msgs = [user(), result("c7"), assistant(), assistant(), call("c7"), user("q")]
    out = split(msgs, [100] * 6, threshold=500, reserve=200)
    assert out.keep_from == 4  # result messages[1] compacted, its call messages[4] kept
    assert not out.valid
    assert len(out.problems) == 1
    assert "invalid split" in out.problems[0]
    assert "messages[1] answers 'c7' of messages[4]" in out.problems[0]


def test_tool_result_before_its_tool_use_wholly_kept_is_reported_but_valid() -> None:
    msgs = [user(), assistant(), user(), result("c7"), call("c7"), user("q")]
    out = split(msgs, [100, 100, 100, 100, 100, 100], threshold=500, reserve=300)
    assert out.keep_from == 3
    assert out.valid
    assert any("before their tool_use" in p and "messages[3]" in p for p in out.problems)


def test_chained_moves_each_pair_exposes_the_next() -> None:
    msgs = [
        user(),  # 0
        assistant(),  # 1
        user("do two things"),  # 2
        call("X"),  # 3
        call("Y"),  # 4
        result("X"),  # 5
        assistant("X done"),  # 6
        result("Y"),  # 7
        user("thanks, next"),  # 8
    ]
    out = split(msgs, [100] * 9, threshold=500, reserve=200)
    # walk keeps 7-8; Y's result pulls 4; the newly kept 5 (X's result) pulls 3; 3
    # replies to the user turn 2
    assert out.keep_from == 2
    assert out.valid
    assert out.problems == (
        "kept messages[4] with the tool_use 'Y' whose tool_result is messages[7]",
        "kept messages[3] with the tool_use 'X' whose tool_result is messages[5]",
        "kept the user message messages[2] with the assistant reply messages[3]",
    )
    assert out.kept_tokens == 700
    assert out.over_reserve


def test_moves_reaching_the_first_message_compact_nothing() -> None:
    msgs = [user("start"), call("c1"), result("c1"), user("q")]
    out = split(msgs, [100, 100, 100, 100], threshold=300, reserve=200)
    assert out.needs_compaction  # reflects the total
    assert out.keep_from == 0
    assert out.kept_tokens == 400
    assert out.over_reserve
    assert "nothing to compact" in out.problems[-1]


def test_messages_fitting_the_reserve_compact_nothing() -> None:
    msgs = [user(), assistant()]
    out = split(msgs, [100, 100], threshold=1_000, reserve=500, system=800, summary=300)
    assert out.needs_compaction
    assert out.keep_from == 0
    assert not out.over_reserve
    assert len(out.problems) == 1
    assert "fit the reserve" in out.problems[0]


def test_no_messages_over_threshold() -> None:
    out = split([], [], threshold=100, reserve=50, system=200)
    assert out.needs_compaction
    assert out.keep_from == 0
    assert out.kept_tokens == 0
    assert not out.over_reserve
    assert out.valid
    assert "nothing to compact" in out.problems[0]


def test_orphan_tool_result_is_a_problem_but_valid() -> None:
    msgs = [user(), assistant(), result("gone_1"), assistant("so"), user("q")]
    out = split(msgs, [100, 100, 100, 100, 100], threshold=300, reserve=300)
    assert out.keep_from == 2
    assert out.valid
    assert len(out.problems) == 1
    assert "without a tool_use" in out.problems[0]
    assert "'gone_1'" in out.problems[0]


def test_orphan_tool_result_reported_even_without_compaction() -> None:
    out = split([result("gone"), user("q")], [10, 10], threshold=1_000, reserve=10)
    assert not out.needs_compaction
    assert out.valid
    assert any("'gone'" in p for p in out.problems)


def test_agentscope_parallel_calls_answered_by_several_tool_messages() -> None:
    msgs = [
        user(),  # 0
        assistant(),  # 1
        user("compare three files"),  # 2
        assistant("let me look"),  # 3
        call("r1", "r2", "r3", text="reading them"),  # 4
        result("r1"),  # 5
        result("r2"),  # 6
        result("r3"),  # 7
        assistant("they differ in ..."),  # 8
        user("why?"),  # 9
    ]
    out = split(msgs, [100, 100, 100, 100, 60, 300, 300, 300, 100, 50], threshold=500, reserve=700)
    # walk keeps 7-9 (450); r3's result pulls the call at 4, which brings r1, r2 along
    assert out.keep_from == 4
    assert out.kept_tokens == 1_110
    assert out.valid
    assert out.problems == ("kept messages[4] with the tool_use 'r3' whose tool_result is messages[7]",)


def test_parallel_call_answered_out_of_order_is_kept_with_all_its_results() -> None:
    msgs = [user(), call("p"), result("p"), call("a", "b"), result("b"), result("a"), user("q")]
    out = split(msgs, [100, 100, 100, 100, 100, 100, 100], threshold=300, reserve=200)
    assert out.keep_from == 3
    assert out.valid


def test_tool_use_and_result_in_one_message_need_no_move() -> None:
    both = ContextMessage(MessageRole.ASSISTANT, (ToolUseBlock("s", "calc"), ToolResultBlock("s", "4")))
    msgs = [user(), assistant(), user(), assistant(), both, user("q")]
    out = split(msgs, [100] * 6, threshold=300, reserve=200)
    assert out.keep_from == 4
    assert out.problems == ()


def test_reused_tool_id_pairs_with_the_nearest_earlier_call() -> None:
    msgs = [user(), call("dup"), result("dup"), user(), call("dup"), result("dup"), user("q")]
    out = split(msgs, [100] * 7, threshold=300, reserve=200)
    assert out.keep_from == 3  # pulled to messages[4] (not messages[1]), then the user turn 3
    assert out.valid


# -- errors --------------------------------------------------------------------------
def test_token_count_per_message_is_required() -> None:
    with pytest.raises(ValueError, match="2 counts for 3 messages"):
        split(alternating(3), [1, 2], threshold=10, reserve=5)


@pytest.mark.parametrize("field", ["system", "summary", "threshold", "reserve"])
def test_negative_budget_raises(field: str) -> None:
    budgets = {"system": 0, "summary": 0, "threshold": 10, "reserve": 5} | {field: -1}
    with pytest.raises(ValueError, match="must be >= 0"):
        split(alternating(2), [1, 1], **budgets)


def test_negative_message_count_raises() -> None:
    with pytest.raises(ValueError, match=r"message_tokens\[1\]"):
        split(alternating(2), [1, -1], threshold=10, reserve=5)


# -- cost ----------------------------------------------------------------------------
def test_long_chain_of_moves_is_linear() -> None:
    """Each message answers the call of the one before and makes the next call, so the
    boundary moves one message at a time back to the start: a rescan of the kept part
    per move would be quadratic (~2e8 steps here, minutes), the incremental scan is
    linear (well under a second)."""
    n = 20_000
    msgs = [user("go")]
    for i in range(1, n):
        blocks: tuple[ToolUseBlock | ToolResultBlock, ...] = (ToolUseBlock(f"c{i}", "step"),)
        if i > 1:
            blocks = (ToolResultBlock(f"c{i - 1}", "ok"), *blocks)
        msgs.append(ContextMessage(MessageRole.ASSISTANT, blocks))
    msgs.append(result(f"c{n - 1}"))
    msgs.append(user("q"))
    started = time.perf_counter()
    out = split(msgs, [10] * len(msgs), threshold=100, reserve=20)
    elapsed = time.perf_counter() - started
    assert out.keep_from == 0
    assert len(out.problems) == n + 1  # n - 1 tool moves, the user turn, "nothing to compact"
    assert elapsed < 5.0
