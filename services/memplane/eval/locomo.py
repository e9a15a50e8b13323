"""The LoCoMo benchmark (locomo10.json) as typed conversations, sessions, turns and questions.

Source: Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024 (arXiv:2402.17753), github.com/snap-research/LoCoMo ``data/locomo10.json``
(CC BY-NC 4.0: internal, non-commercial benchmarking only; never ship the data).

The file is a list of 10 samples. Each has ``sample_id`` ("conv-26"), ``conversation``
with ``speaker_a`` / ``speaker_b``, ``session_N`` lists of turns (``speaker``, ``dia_id``
such as "D3:12", ``text``, optional ``blip_caption`` of a shared image) and
``session_N_date_time`` ("1:56 pm on 8 May, 2023", no time zone: read as UTC), and
``qa``: questions with a ``category`` (1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop, 5 adversarial — the authors' mapping) and ``evidence`` dia_ids.

Evidence is cleaned as in the shared ``locomo10_qrels.jsonl`` (and so as the published
baselines were scored): entries are split on ";" and whitespace, "D:11:26" becomes
"D11:26" and "D30:05" becomes "D30:5", ids absent from the conversation are dropped,
duplicates are dropped keeping the first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""LoCoMo question categories (the authors' mapping, as in locomo10_qrels.jsonl)."""

SCORED_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)
"""Categories scored by evidence recall; adversarial questions (5) are left out, as in
the published baselines (1,536 questions with evidence)."""

_MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}
_SESSION_TIME = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.IGNORECASE
)
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_ID = re.compile(r"^D:?(\d+):0*(\d+)$")
_DNS_UNSAFE = re.compile(r"[^a-z0-9-]+")
_MAX_WORKSPACE_NAME = 63


class LocomoFormatError(ValueError):
    """The file is not in the locomo10.json layout (the message says where)."""


@dataclass(frozen=True)
class Turn:
    """One utterance: *dia_id* ("D3:12") is unique within its conversation."""

    dia_id: str
    speaker: str
    text: str
    blip_caption: str = ""

    def content(self) -> str:
        """The text stored as memory content: the utterance, plus
        " [shares an image: <caption>]" when the turn shared an image with a caption."""
        if self.blip_caption:
            return f"{self.text} [shares an image: {self.blip_caption}]"
        return self.text


@dataclass(frozen=True)
class Session:
    """One dated session: *session_id* is "session_N"; *time* is timezone-aware UTC;
    *date_time* is the file's ``session_N_date_time`` exactly as written
    ("1:56 pm on 8 May, 2023"; "" when the session was not read from a file)."""

    number: int
    time: datetime
    turns: tuple[Turn, ...]
    date_time: str = ""

    @property
    def session_id(self) -> str:
        """ "session_N", the scope session_id the turns are written under."""
        return f"session_{self.number}"


@dataclass(frozen=True)
class Question:
    """A question with its cleaned evidence dia_ids (possibly empty: not scorable)."""

    sample_id: str
    qa_index: int
    category: int
    question: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: two speakers, sessions in order, and its questions."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turn_count(self) -> int:
        """Number of turns over all sessions."""
        return sum(len(s.turns) for s in self.sessions)

    def dia_ids(self) -> set[str]:
        """Every turn's dia_id."""
        return {t.dia_id for s in self.sessions for t in s.turns}

    def scored_questions(self, categories: Iterable[int] = SCORED_CATEGORIES) -> list[Question]:
        """Questions of *categories* that have at least one evidence id, in file order."""
        wanted = set(categories)
        return [q for q in self.questions if q.category in wanted and q.evidence]


def parse_session_time(text: str) -> datetime:
    """Parse LoCoMo's "1:56 pm on 8 May, 2023" into an aware UTC datetime.

    Locale-independent. Raises `LocomoFormatError` for anything else.
    """
    match = _SESSION_TIME.match(text)
    month = _MONTHS.get(match.group(5).lower()) if match else None
    if match is None or month is None:
        raise LocomoFormatError(f"unrecognised session date-time {text!r}")
    hour = int(match.group(1)) % 12 + (12 if match.group(3).lower() == "p" else 0)
    try:
        return datetime(int(match.group(6)), month, int(match.group(4)), hour, int(match.group(2)), tzinfo=UTC)
    except ValueError as exc:
        raise LocomoFormatError(f"invalid session date-time {text!r}: {exc}") from None


def normalize_evidence(raw: Sequence[str], known: set[str]) -> tuple[str, ...]:
    """Clean a question's raw evidence list into dia_ids present in the conversation.

    Splits entries on ";" and whitespace, repairs "D:11:26" → "D11:26" and leading zeros
    ("D30:05" → "D30:5"), drops ids not in *known* and duplicates (first kept). This is the
    cleaning of the shared locomo10_qrels.jsonl.
    """
    out: list[str] = []
    for entry in raw:
        for token in re.split(r"[;\s]+", str(entry)):
            match = _EVIDENCE_ID.match(token)
            if match is None:
                continue
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in known and dia_id not in out:
                out.append(dia_id)
    return tuple(out)


def workspace_name(prefix: str, sample_id: str) -> str:
    """A DNS-label-safe workspace name "<prefix>-<sample_id>", e.g. "locomo-conv-26".

    Lower-cased; runs of characters other than a-z, 0-9 and "-" become "-"; at most 63
    characters; starts with a letter (a "w" is prepended if needed) and does not end
    with "-". Raises `ValueError` if nothing usable remains.
    """
    raw = f"{prefix}-{sample_id}" if prefix else sample_id
    name = _DNS_UNSAFE.sub("-", raw.lower())
    name = re.sub(r"-{2,}", "-", name).strip("-")
    if name and not name[0].isalpha():
        name = f"w-{name}"
    name = name[:_MAX_WORKSPACE_NAME].rstrip("-")
    if not name:
        raise ValueError(f"no workspace name can be made from {raw!r}")
    return name


def _turn(item: dict[str, Any], where: str) -> Turn:
    try:
        return Turn(
            dia_id=str(item["dia_id"]).strip(),
            speaker=str(item["speaker"]),
            text=str(item["text"]),
            blip_caption=str(item.get("blip_caption") or "").strip(),
        )
    except KeyError as exc:
        raise LocomoFormatError(f"{where}: turn without {exc.args[0]!r}") from None


def _sessions(conversation: dict[str, Any], sample_id: str) -> tuple[Session, ...]:
    sessions = []
    for key, turns in conversation.items():
        match = _SESSION_KEY.match(key)
        if match is None or not turns:
            continue
        when = conversation.get(f"{key}_date_time")
        if not isinstance(when, str):
            raise LocomoFormatError(f"{sample_id}: {key} has no {key}_date_time")
        where = f"{sample_id} {key}"
        turns_read = tuple(_turn(t, where) for t in turns)
        sessions.append(Session(int(match.group(1)), parse_session_time(when), turns_read, date_time=when))
    return tuple(sorted(sessions, key=lambda s: s.number))


def _questions(sample: dict[str, Any], sample_id: str, known: set[str]) -> tuple[Question, ...]:
    return tuple(
        Question(
            sample_id=sample_id,
            qa_index=index,
            category=int(qa["category"]),
            question=str(qa["question"]),
            evidence=normalize_evidence(qa.get("evidence") or [], known),
        )
        for index, qa in enumerate(sample.get("qa") or [])
    )


def _conversation(sample: dict[str, Any]) -> Conversation:
    try:
        sample_id = str(sample["sample_id"])
        body = sample["conversation"]
        speakers = (str(body["speaker_a"]), str(body["speaker_b"]))
    except (KeyError, TypeError) as exc:
        raise LocomoFormatError(f"sample without {exc}") from None
    sessions = _sessions(body, sample_id)
    known = {t.dia_id for s in sessions for t in s.turns}
    return Conversation(sample_id, *speakers, sessions, _questions(sample, sample_id, known))


def load_locomo(path: Path, limit: int | None = None) -> list[Conversation]:
    """Read locomo10.json; the first *limit* conversations when given (None: all).

    Raises `OSError` if unreadable, `LocomoFormatError` (a `ValueError`) if malformed.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LocomoFormatError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, list):
        raise LocomoFormatError(f"{path}: expected a list of samples")
    samples = data if limit is None else data[:limit]
    return [_conversation(s) for s in samples]
