"""The extractor used when no LLM is configured: first-person statements of the user, and
the user's instructions on how to act, in English and Chinese, found by fixed patterns
(issue 11, item 7; issue 27). Deterministic: the same messages give the same facts.
Recorded with method `rules`, never presented as the LLM path; what it misses (anything
not said in the first person, facts spread over several sentences, an assistant's
suggestion, what a tool's output shows) only the LLM path extracts.

A statement is one sentence (split at . ! ? ; and their full-width forms, 。 and line
breaks; compaction's splitter drops the short sentences kept here) of a USER message
that holds one of the patterns below at its start or after a clause break (a comma,
"and", "but", "so", a full-width comma). Questions, conditionals ("if I moved to …", "如果我…") and
reported speech ("you said I …") are skipped. Each statement becomes one `user` memory
whose content is the sentence as the user wrote it.

An instruction is a sentence of a USER message that opens (after at most an "ok", "also",
"and", "btw" and a "please"; "好的", "另外", "还有", "请" in Chinese) with "always" /
"never" and a verb, "from now on" / "going forward", "remember to" / "make sure to",
"use X, not Y" / "use X instead of Y", "don't use" ("以后", "从现在起", "总是", "永远不要",
"一定要", "记得", "用X, 不要用Y", "不要用", "别用"), and is no statement above (a statement
pattern wins: "from now on I live in Porto" is an address). The same skips apply; so do
"never mind", "always good to know" and "以后再说" (chatter, not instructions). Each
becomes one `procedural` memory named "instruction". Only the user's words count: an
assistant's "I'll always …" is its own promise, and a tool's output is what one call saw.

Single-valued attributes (`residence`, `workplace`, `name` and every "my X is …" /
"我的X是…") carry an attribute key (prefixed "<name>/" when the message names its speaker:
in a conversation of several people, LoCoMo's, each has their own): a newer statement
with the same key in the same scope supersedes the older one (a move supersedes the old
address); the others (`identity`, `preference`, instructions) are multi-valued and only
add (a new hobby does not retire the old one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memplane.domain.models import ConversationMessage, MemoryType, MessageRole
from memplane.server.llm.extraction import Fact

METHOD = "rules"
"""The `method` recorded on memories and events this extractor writes."""
MAX_STATEMENT_CHARS = 300
"""Longer sentences are not statements (a pasted paragraph, not a fact about oneself)."""
MAX_FACTS = 20
"""Facts taken from one conversation span, first ones first."""


@dataclass(frozen=True)
class RuleFact:
    """One statement or instruction: the fact (type user, procedural for an instruction;
    speaker user), for a single-valued attribute its key (`residence`, `workplace`,
    `name`, `my:<thing>`; None otherwise), and the index of the message it was said in."""

    fact: Fact
    attribute: str | None
    message: int


@dataclass(frozen=True)
class _Pattern:
    kind: str  # the memory's name: what the statement is about
    regex: re.Pattern[str]
    single: bool  # single-valued: a newer statement supersedes
    type: MemoryType = MemoryType.USER


_EN_LEAD = r"(?:^|(?<=,)\s*|\b(?:and|but|so|now|also)\s+)"
_EN = (
    _Pattern("residence", re.compile(_EN_LEAD + r"I(?:'ve| have)? (?:just )?moved to \S", re.I), True),
    _Pattern("residence", re.compile(_EN_LEAD + r"I(?: am|'m)? (?:now )?liv(?:e|ing) in \S", re.I), True),
    _Pattern("workplace", re.compile(_EN_LEAD + r"I(?: am|'m)? (?:now )?work(?:ing)? (?:at|for) \S", re.I), True),
    _Pattern("name", re.compile(_EN_LEAD + r"my name is \S", re.I), True),
    _Pattern("my", re.compile(_EN_LEAD + r"my (?P<thing>[a-z][a-z' -]{0,40}?) (?:is|are) \S", re.I), True),
    _Pattern(
        "preference",
        re.compile(_EN_LEAD + r"I (?:really )?(?:like|love|enjoy|prefer|hate|dislike|don't like|do not like) \S", re.I),
        False,
    ),
    _Pattern(
        "identity", re.compile(_EN_LEAD + r"(?:I am|I'm) (?:a|an|the|\w+ years old|allergic|vegetarian)\b", re.I), False
    ),
)
_ZH_LEAD = r"(?:^|(?<=[，,])|(?:而且|但是|所以|现在))\s*"  # noqa: RUF001 - a full-width comma
_ZH = (
    _Pattern("residence", re.compile(_ZH_LEAD + r"我(?:已经|刚)?搬(?:到|去)了?\S"), True),
    _Pattern("residence", re.compile(_ZH_LEAD + r"我(?:现在)?住在\S"), True),
    _Pattern("workplace", re.compile(_ZH_LEAD + r"我(?:现在)?在\S{1,30}?(?:工作|上班)"), True),
    _Pattern("name", re.compile(_ZH_LEAD + r"我(?:的名字)?叫\S"), True),
    _Pattern("my", re.compile(_ZH_LEAD + r"我的(?P<thing>[^是，,\s]{1,10})是\S"), True),  # noqa: RUF001 - 我的X是
    _Pattern("preference", re.compile(_ZH_LEAD + r"我(?:很|最|非常)?(?:喜欢|爱|讨厌|不喜欢)\S"), False),
    _Pattern("identity", re.compile(_ZH_LEAD + r"我是\S"), False),
)
_INSTRUCTION = "instruction"
_EN_OPEN = r"^(?:(?:ok(?:ay)?|also|and|oh|btw|by the way)[,:]?\s+)*(?:please\s+)?"
_EN_CHATTER = r"(?!(?:mind|again|good|nice|great|happy|glad|fun|a pleasure|welcome)\b)"
_ZH_OPEN = r"^(?:(?:好的?|另外|还有|对了)[，,]?\s*)?请?"  # noqa: RUF001 - a full-width comma
_PROCEDURAL = tuple(
    _Pattern(_INSTRUCTION, re.compile(regex, re.I), False, MemoryType.PROCEDURAL)
    for regex in (
        _EN_OPEN + r"(?:always|never)\s+" + _EN_CHATTER + r"[a-z]+\s+\S",
        _EN_OPEN + r"(?:from now on|going forward|from here on|henceforth)\b[,:]?\s+\S+\s+\S",
        _EN_OPEN + r"(?:remember|make sure|be sure) to\s+\S",
        _EN_OPEN + r"use\s+\S+(?:\s+\S+){0,3}?,?\s+(?:not|instead of|rather than)\s+\S",
        _EN_OPEN + r"(?:don't|do not) (?:ever )?use\s+\S",
        _ZH_OPEN + r"(?:以后|今后|从现在起|从现在开始|从今以后)(?!再说)[，,]?\s*\S{2,}",  # noqa: RUF001
        _ZH_OPEN + r"(?:总是|永远不要|一定要|千万不要|务必|每次都|记得)\S{2,}",
        _ZH_OPEN + r"用\S{1,20}?[，,]?\s*(?:不要|别|而不是)用?\S",  # noqa: RUF001
        _ZH_OPEN + r"(?:不要|别)用\S",
    )
)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")  # noqa: RUF001 - Chinese sentence ends
_SKIP = re.compile(r"\b(?:if|would|could|should|you said|you told me)\b|如果|要是|假如|你说", re.I)


def statements(messages: Sequence[ConversationMessage]) -> list[RuleFact]:
    """The first-person statements and instructions in the USER messages of *messages*, in
    order, at most `MAX_FACTS`; a sentence said twice is one fact (the first). Message ids become the
    facts' provenance; `valid_from` is the message's time (None: the session's)."""
    found: list[RuleFact] = []
    seen: set[str] = set()
    for position, message in enumerate(messages):
        if message.role is not MessageRole.USER:
            continue
        for sentence in _sentences(message.content):
            hit = _match(sentence)
            key = " ".join(sentence.casefold().split())
            if hit is None or key in seen:
                continue
            seen.add(key)
            pattern, thing = hit
            attribute = (f"my:{thing}" if pattern.kind == "my" else pattern.kind) if pattern.single else None
            if attribute is not None and message.name:  # one speaker's address is not another's
                attribute = f"{message.name}/{attribute}"
            name = thing if pattern.kind == "my" else pattern.kind
            who = f"{message.name}'s" if message.name else "the user's"
            fact = Fact(
                index=len(found) + 1,
                type=pattern.type,
                name=name,
                description=f"{who} {name}, as they said it",
                content=sentence,
                speaker="user",
                valid_from=message.created_at,
                message_ids=(message.id,) if message.id else (),
            )
            found.append(RuleFact(fact, attribute, position))
            if len(found) == MAX_FACTS:
                return found
    return found


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _match(sentence: str) -> tuple[_Pattern, str] | None:
    """The first pattern *sentence* states (a statement's before an instruction's), and the
    thing of a "my X is" pattern ("" else)."""
    if len(sentence) > MAX_STATEMENT_CHARS or sentence.endswith(("?", "\uff1f")) or _SKIP.search(sentence):
        return None
    for pattern in (*_EN, *_ZH, *_PROCEDURAL):
        hit = pattern.regex.search(sentence)
        if hit is not None:
            thing = hit.groupdict().get("thing") or ""
            return pattern, " ".join(thing.casefold().split())
    return None
