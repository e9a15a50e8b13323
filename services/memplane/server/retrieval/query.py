"""Query understanding without an LLM: the names, the time, the quoted phrases of a question
and whether it asks for a time.

- **Names**: the capitalised words of the query ("Caroline", "Caroline's" → "caroline"),
  lower-cased. The search matches them to the speaker of each candidate (its
  ``metadata.speaker``, which WriteConversation stores from the message's `name`), so only
  a word naming one of the scope's speakers ever boosts anything: a capitalised "LGBTQ"
  or "What" matches no speaker. LoCoMo's questions name the person they ask about
  (Maharana et al., ACL 2024, §3: every question is about one or both speakers).
- **Time**: the first absolute date expression of the query — a day ("3 June, 2023",
  "June 26, 2023", "2023-06-26"), a month ("in May 2023", "May, 2023") or a year ("in
  2023") — as a half-open UTC interval [start, end) of that granularity, or one relative
  to *now* ("yesterday", "last week", "last month", "last year", "this year"). The
  search widens it by `TimeRange.slack` days each side and boosts candidates whose
  `valid_from` (a turn's time) falls inside: the date a question names is, in a
  conversation, the date of the session that mentions it or close to it. Rule-based
  temporal taggers (HeidelTime, Strötgen & Gertz 2013; SUTime, Chang & Manning 2012) do
  the same normalisation at a far larger scale; these few patterns cover what LoCoMo's
  questions write.
- **Phrases**: the texts the query quotes ("Becoming Nicole", “The Alchemist”); the search
  boosts candidates holding one as a phrase (PostgreSQL's phraseto_tsquery: the words in
  order, stemmed), as web search engines read quotes.
- **When-questions**: a question that asks for a time or a duration ("When did ...", "How
  long ...", "What year ...", "Since when ...", "How many years ago ..."; `asks_when`). In a
  conversation the answer is most often a turn that dates its event relative to the session
  ("last Friday", "3 years ago"): the search boosts candidates holding such an expression
  (`memplane.server.storage.search_boosts.TIME_EXPRESSION`). LoCoMo's temporal questions are of
  this kind (Maharana et al., ACL 2024, §4.1: answers are inferred from the session's date
  and a relative expression in the turn).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MAX_NAMES = 16
"""Names taken from one query at most (a bound on the statement's array parameter)."""

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("day", re.compile(rf"\b{_YEAR}-(?P<month_n>[01]\d)-(?P<day>[0-3]\d)\b")),
    ("day", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)),
    ("day", re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)),
    ("month", re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", re.IGNORECASE)),
    ("year", re.compile(rf"\b(?:in|during|of|since|by)\s+{_YEAR}\b", re.IGNORECASE)),
)
_RELATIVE = re.compile(r"\b(yesterday|last\s+week|last\s+month|last\s+year|this\s+year)\b", re.IGNORECASE)
_PHRASE = re.compile(r'"([^"]{0,200})"|\u201c([^\u201d]{0,200})\u201d')
MAX_PHRASES = 4
"""Quoted phrases taken from one query at most."""
_ASKS_WHEN = re.compile(
    r"^\W*(?:when|how\s+long|since\s+when|until\s+when|(?:what|which)\s+(?:year|month|day|date|week|time)"
    r"|how\s+many\s+(?:years|months|weeks|days)\s+ago|in\s+(?:what|which)\s+(?:year|month))(?![\w-])",
    re.IGNORECASE,
)
_NAME = re.compile(r"\b([A-Z][a-z]+(?:-[A-Z][a-z]+)?)(?:'s|\u2019s)?\b")


@dataclass(frozen=True)
class TimeRange:
    """A half-open UTC interval [start, end) a query names, and the text it came from."""

    start: datetime
    end: datetime
    text: str

    def widened(self, slack_days: float) -> tuple[datetime, datetime]:
        """[start - slack, end + slack): the interval a candidate's time must fall in."""
        slack = timedelta(days=slack_days)
        return self.start - slack, self.end + slack


def query_names(query: str) -> list[str]:
    """The capitalised words of *query*, lower-cased, without a possessive "'s", in order,
    each once, at most `MAX_NAMES` (e.g. "What did Caroline's mom give Melanie?" →
    ["what", "caroline", "melanie"]); matched to speakers, so question words are harmless."""
    out = list(dict.fromkeys(m.group(1).lower() for m in _NAME.finditer(query)))
    return out[:MAX_NAMES]


def asks_when(query: str) -> bool:
    """Whether *query* asks for a time or a duration: it opens with "when", "how long",
    "since when", "until when", "what/which year|month|day|date|week|time", "in what/which
    year|month" or "how many years|months|weeks|days ago" (any case, after punctuation),
    e.g. "When did Caroline go to the support group?" → True, "What did Caroline do?" → False."""
    return _ASKS_WHEN.search(query) is not None


def query_phrases(query: str) -> list[str]:
    """The texts *query* quotes in straight or curly double quotes (1-200 characters each,
    stripped, non-empty), in order, at most `MAX_PHRASES` (e.g. 'What did Caroline take
    away from "Becoming Nicole"?' → ["Becoming Nicole"])."""
    found = (m.group(1) or m.group(2) or "" for m in _PHRASE.finditer(query))
    return [p.strip() for p in found if p.strip()][:MAX_PHRASES]


def _month_end(year: int, month: int) -> datetime:
    return datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)


def query_time(query: str, now: datetime) -> TimeRange | None:
    """The first date expression of *query* as a `TimeRange` (the module docstring lists
    the forms), relative ones anchored at *now* (aware); None when there is none or it
    names no real date ("31 February 2023")."""
    found: list[tuple[int, TimeRange]] = []
    for grain, pattern in _PATTERNS:
        match = pattern.search(query)
        if match is None:
            continue
        parts = match.groupdict()
        try:
            year = int(parts["year"])
            month = (
                int(parts["month_n"]) if parts.get("month_n") else _MONTHS.get((parts.get("month") or "").lower(), 1)
            )
            if grain == "day":
                start = datetime(year, month, int(parts["day"]), tzinfo=UTC)
                end = start + timedelta(days=1)
            elif grain == "month":
                start, end = datetime(year, month, 1, tzinfo=UTC), _month_end(year, month)
            else:
                start, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
        except ValueError:
            continue
        found.append((match.start(), TimeRange(start, end, match.group(0))))
    relative = _RELATIVE.search(query)
    if relative is not None:
        found.append((relative.start(), _relative(relative.group(1).lower().split()[-1], relative.group(0), now)))
    if not found:
        return None
    return min(found, key=lambda f: (f[0], f[1].end - f[1].start))[1]


def _relative(unit: str, text: str, now: datetime) -> TimeRange:
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "yesterday":
        return TimeRange(today - timedelta(days=1), today, text)
    if unit == "week":
        monday = today - timedelta(days=today.weekday())
        return TimeRange(monday - timedelta(days=7), monday, text)
    if unit == "month":
        first = today.replace(day=1)
        previous = (first - timedelta(days=1)).replace(day=1)
        return TimeRange(previous, first, text)
    if text.lower().startswith("this"):
        return TimeRange(today.replace(month=1, day=1), today.replace(year=today.year + 1, month=1, day=1), text)
    first = today.replace(month=1, day=1)
    return TimeRange(first.replace(year=first.year - 1), first, text)
