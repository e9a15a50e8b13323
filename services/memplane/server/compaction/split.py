"""Where to split an agent's context for compaction (ReMe's check_context).

A pure function over token counts already made (`memplane.text.tokens`): no I/O, no
counting. The algorithm follows ReMe's `AsMsgHandler.context_check` (called by its
`ContextChecker` op and its `pre_reasoning_hook`): compare the whole context with the
threshold, keep the newest messages within the reserve, and never cut a tool call from
its result. It differs from ReMe in that the kept part is always a contiguous suffix
(ReMe keeps an index set) and in the rules that protect the current user turn and the
user/assistant pairs (the `CheckContext` contract in `proto/memplane/v1/compaction.proto`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memplane.domain.context import ContextMessage, ContextSplit, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole

MAX_LISTED = 5  # items named in one aggregated problem string; the rest are counted


def split_context(
    messages: Sequence[ContextMessage],
    message_tokens: Sequence[int],
    *,
    system_prompt_tokens: int,
    previous_summary_tokens: int,
    threshold_tokens: int,
    reserve_tokens: int,
) -> ContextSplit:
    """Compare the context's tokens with *threshold_tokens* and, when it is exceeded,
    choose `keep_from`: `messages[:keep_from]` are to be compacted, the rest kept.

    Arguments: *messages* oldest first (n of them); *message_tokens* the tokens of each
    message, framing included (n non-negative ints, as `TokenCounter.count_messages`
    gives them: OpenAI cookbook counting); the system prompt's and previous summary's tokens (counted, never
    split); the threshold and the reserve, all in tokens.

    Rules (ReMe's `context_check`, as `CheckContext` serves it):

    1. total = system prompt + previous summary + sum(message_tokens). When
       total <= threshold nothing is compacted: `needs_compaction` False, `keep_from` 0,
       `kept_tokens` the messages' sum, `over_reserve` False. (ReMe compacts at
       total >= threshold; the contract says "exceeds".)
    2. Otherwise walk back from the newest message adding its tokens while the sum stays
       <= reserve; the first message that would overflow and everything before it are
       to be compacted (`keep_from` = the index after it). ReMe's walk.
    3. The current turn is always kept: `keep_from` <= the index of the newest user
       message (role USER; a USER-role message made only of tool_result blocks, as
       Anthropic-style clients send tool outputs, is a tool message, not a user turn).
       Without a user message the newest message is kept. Both may exceed the reserve.
    4. Pairs, applied until stable; each move only lowers `keep_from` (keeps more):
       (a) a tool_use (`ToolUseBlock.id`) in the compacted part whose tool_result
           (`ToolResultBlock.tool_use_id`) is kept pulls the boundary back to the
           message with the tool_use (ReMe keeps a tool_result's tool_use too);
       (b) a kept assistant message at `keep_from` right after a user turn pulls that
           user turn in (a user turn is never split from the reply to it).
       Each move is recorded in `problems`. Only the newly kept messages are scanned
       after a move, so the whole split is O(messages + blocks).
    5. `kept_tokens` = sum(message_tokens[keep_from:]); `over_reserve` = kept_tokens >
       reserve (only when compaction is needed). `keep_from` 0 with `needs_compaction`
       True means nothing can be compacted (all messages fit the reserve, or the rules
       reached messages[0]); `problems` says which.
    6. `valid` is False only when a pair straddles the boundary in a way moving it back
       cannot fix: a compacted tool_result whose tool_use is kept (the result comes
       before its call). ReMe's `validate_tool_ids_alignment` checks the same thing on
       its kept set. A kept tool_result with no tool_use anywhere (earlier context
       already compacted by the client) and a result-before-call pair wholly kept are
       reported in `problems` (aggregated, at most `MAX_LISTED` named) but keep the
       split valid: compacting does not make them worse.

    Tool calls are paired by id: a tool_result answers the nearest earlier tool_use of
    that id, else (malformed) the first later one. Empty ids pair with nothing.

    Raises `ValueError` when `len(message_tokens) != len(messages)`, a message count
    is negative or a budget is negative (the service validates requests first, so this
    is a programming error).
    """
    n = len(messages)
    if len(message_tokens) != n:
        raise ValueError(f"message_tokens has {len(message_tokens)} counts for {n} messages")
    budgets = {
        "system_prompt_tokens": system_prompt_tokens,
        "previous_summary_tokens": previous_summary_tokens,
        "threshold_tokens": threshold_tokens,
        "reserve_tokens": reserve_tokens,
    }
    for name, value in budgets.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    tokens = tuple(int(t) for t in message_tokens)
    for i, t in enumerate(tokens):
        if t < 0:
            raise ValueError(f"message_tokens[{i}] must be >= 0, got {t}")

    messages_total = sum(tokens)
    total = system_prompt_tokens + previous_summary_tokens + messages_total
    needs_compaction = total > threshold_tokens
    pairs = _pair_tool_calls(messages)
    problems: list[str] = []
    keep_from = 0
    if needs_compaction:
        keep_from = _boundary(messages, tokens, reserve_tokens, pairs, problems)
        if keep_from == 0 and n:
            problems.append(_nothing_to_compact(messages_total, reserve_tokens))
        elif not n:
            problems.append("nothing to compact: no messages; the system prompt and summary exceed the threshold")

    valid = _report_pairs(pairs, keep_from, problems)
    kept_tokens = sum(tokens[keep_from:])
    return ContextSplit(
        total_tokens=total,
        system_prompt_tokens=system_prompt_tokens,
        previous_summary_tokens=previous_summary_tokens,
        message_tokens=tokens,
        threshold_tokens=threshold_tokens,
        needs_compaction=needs_compaction,
        keep_from=keep_from,
        kept_tokens=kept_tokens,
        over_reserve=needs_compaction and kept_tokens > reserve_tokens,
        valid=valid,
        problems=tuple(problems),
    )


@dataclass
class _Pairs:
    """Tool calls paired by id, by message index."""

    # result message -> (earliest message before it holding a tool_use it answers, that id)
    back: dict[int, tuple[int, str]] = field(default_factory=dict)
    # (result message, later tool_use message, id): a result before its call
    reversed: list[tuple[int, int, str]] = field(default_factory=list)
    # (result message, id): no tool_use of that id anywhere
    orphans: list[tuple[int, str]] = field(default_factory=list)


def _pair_tool_calls(messages: Sequence[ContextMessage]) -> _Pairs:
    """One forward pass over the blocks: O(messages + blocks)."""
    pairs = _Pairs()
    last_use: dict[str, int] = {}
    waiting: dict[str, list[int]] = {}  # results seen before any tool_use of their id
    for i, message in enumerate(messages):
        for block in message.blocks:
            if isinstance(block, ToolUseBlock):
                if not block.id:
                    continue
                for j in waiting.pop(block.id, ()):
                    if j < i:
                        pairs.reversed.append((j, i, block.id))
                last_use[block.id] = i
            elif isinstance(block, ToolResultBlock):
                tool_id = block.tool_use_id
                if not tool_id:
                    continue
                use = last_use.get(tool_id)
                if use is None:
                    waiting.setdefault(tool_id, []).append(i)
                elif use < i:
                    current = pairs.back.get(i)
                    if current is None or use < current[0]:
                        pairs.back[i] = (use, tool_id)
                # use == i: call and result in one message, no split separates them
    pairs.orphans = sorted((j, tool_id) for tool_id, js in waiting.items() for j in js)
    return pairs


def _boundary(
    messages: Sequence[ContextMessage],
    tokens: tuple[int, ...],
    reserve: int,
    pairs: _Pairs,
    problems: list[str],
) -> int:
    """Rules 2 to 4 of `split_context`; appends each move to *problems*."""
    n = len(messages)
    # 2. the reserve walk
    kept = 0
    keep_from = n
    while keep_from > 0 and kept + tokens[keep_from - 1] <= reserve:
        keep_from -= 1
        kept += tokens[keep_from]

    # 3. the current turn (the newest user message and everything after it)
    anchor = next((i for i in range(n - 1, -1, -1) if messages[i].opens_user_turn()), None)
    if anchor is not None and keep_from > anchor:
        turn = sum(tokens[anchor:])
        problems.append(
            f"kept the newest user message messages[{anchor}] and the {n - 1 - anchor} message(s) after it"
            f" (the current turn, {turn:,} tokens) over the reserve of {reserve:,} tokens"
        )
        keep_from = anchor
    elif anchor is None and keep_from == n and n:
        problems.append(
            f"kept the newest message messages[{n - 1}] ({tokens[n - 1]:,} tokens; no user message)"
            f" over the reserve of {reserve:,} tokens"
        )
        keep_from = n - 1

    # 4. pairs; messages[keep_from:unscanned] are kept but not yet scanned for rule (a)
    unscanned = n
    while True:
        pull: tuple[int, str, int] | None = None
        for j in range(keep_from, unscanned):
            hit = pairs.back.get(j)
            if hit is not None and hit[0] < keep_from and (pull is None or hit[0] < pull[0]):
                pull = (hit[0], hit[1], j)
        unscanned = keep_from
        if pull is not None:
            use, tool_id, result = pull
            problems.append(
                f"kept messages[{use}] with the tool_use {tool_id!r} whose tool_result is messages[{result}]"
            )
            keep_from = use
            continue
        if (
            keep_from > 0
            and messages[keep_from].role == MessageRole.ASSISTANT
            and messages[keep_from - 1].opens_user_turn()
        ):
            problems.append(
                f"kept the user message messages[{keep_from - 1}] with the assistant reply messages[{keep_from}]"
            )
            keep_from -= 1
            continue
        return keep_from


def _nothing_to_compact(messages_total: int, reserve: int) -> str:
    if messages_total <= reserve:  # the walk itself reached messages[0]; no move was made
        return (
            f"nothing to compact: the messages ({messages_total:,} tokens) fit the reserve of {reserve:,} tokens;"
            " the system prompt and previous summary make the total exceed the threshold"
        )
    return "nothing to compact: keeping the current turn and its pairs whole reached messages[0]"


def _report_pairs(pairs: _Pairs, keep_from: int, problems: list[str]) -> bool:
    """Rule 6: malformed pairs as problems; False when one straddles the boundary."""
    valid = True
    straddling: list[str] = []
    kept_reversed: list[str] = []
    for result, use, tool_id in pairs.reversed:
        if result < keep_from <= use:
            straddling.append(f"messages[{result}] answers {tool_id!r} of messages[{use}]")
        elif keep_from <= result:
            kept_reversed.append(f"messages[{result}] answers {tool_id!r} of messages[{use}]")
    if straddling:
        valid = False
        problems.append(
            f"invalid split: {len(straddling)} tool_result(s) come before their tool_use, the result compacted"
            f" and the call kept; no boundary keeps them together: {_listing(straddling)}"
        )
    if kept_reversed:
        problems.append(
            f"{len(kept_reversed)} kept tool_result(s) come before their tool_use: {_listing(kept_reversed)}"
        )
    orphans = [f"messages[{j}] ({tool_id!r})" for j, tool_id in pairs.orphans if j >= keep_from]
    if orphans:
        problems.append(
            f"{len(orphans)} kept tool_result(s) without a tool_use anywhere (earlier context compacted?):"
            f" {_listing(orphans)}"
        )
    return valid


def _listing(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_LISTED])
    return shown if len(items) <= MAX_LISTED else f"{shown}; and {len(items) - MAX_LISTED} more"
