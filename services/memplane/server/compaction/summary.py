"""The structured summary of compacted messages: six sections, rendered as Markdown.

The sections follow ReMe's compact_memory summary: Goal, Constraints & Preferences,
Progress, Key Decisions, Next Steps, Critical Context (Chinese: 目标, 约束与偏好, 进展,
关键决策, 下一步, 关键上下文). An LLM is asked for them as one JSON object whose keys
are `SECTION_KEYS`; `parse_answer` also accepts that object wrapped in prose or a
```json fence, and Markdown with `##` headings, because OpenAI-compatible servers and
models differ in how well they keep to JSON mode. `render` writes the Markdown the
service returns; `parse_summary_markdown` reads it back (an incremental update starts
from the previous summary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from memplane.text.language import Language

SECTION_KEYS: tuple[str, ...] = ("goal", "constraints", "progress", "decisions", "next_steps", "critical_context")
"""JSON keys of the sections, in render order."""

HEADINGS: dict[Language, tuple[str, ...]] = {
    "en": ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context"),
    "zh": ("目标", "约束与偏好", "进展", "关键决策", "下一步", "关键上下文"),
}
"""Markdown headings of the sections per language, in the order of `SECTION_KEYS`."""

EMPTY_ITEM: dict[Language, str] = {"en": "(none)", "zh": "（无）"}  # noqa: RUF001 - full-width parentheses are Chinese typography
"""The item an empty section renders as."""

# Normalised heading / key text -> section key. Normalisation: lower case, "&" -> "and",
# "_" and "-" -> space, other punctuation dropped, leading numbering dropped.
_ALIAS_NAMES: dict[str, tuple[str, ...]] = {
    "goal": ("goal", "goals", "objective", "目标"),
    "constraints": (
        "constraints and preferences",
        "constraints preferences",
        "constraint and preferences",
        "constraints",
        "preferences",
        "约束与偏好",
        "约束和偏好",
        "约束",
        "偏好",
    ),
    "progress": ("progress", "进展", "进度"),
    "decisions": ("key decisions", "decisions", "关键决策", "决策"),
    "next_steps": ("next steps", "next step", "下一步", "下一步计划", "后续步骤"),
    "critical_context": ("critical context", "context", "关键上下文", "关键背景"),
}
_ALIASES: dict[str, str] = {name: key for key, names in _ALIAS_NAMES.items() for name in names}

_NONE_ITEMS = frozenset({"(none)", "none", "n/a", "（无）", "无", "(无)", "-", ""})  # noqa: RUF001 - Chinese typography
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BOLD_HEADING = re.compile(r"^\s{0,3}\*\*(.+?)\*\*\s*[:：]?\s*$")  # noqa: RUF001 - full-width colon
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+(.*)$")
_NUMBERING = re.compile(r"^(?:\d{1,2}[.)]?\s+)")
_MAX_JSON_STARTS = 200  # "{" positions tried when looking for the JSON object in an answer


class SummaryFormatError(Exception):
    """An answer that is not the structured summary; the message says what is missing."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class StructuredSummary:
    """The six sections, each a tuple of bullet items (plain text, one line each)."""

    goal: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    progress: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    critical_context: tuple[str, ...] = ()

    def sections(self) -> list[tuple[str, tuple[str, ...]]]:
        """(key, items) of every section, in `SECTION_KEYS` order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def section_key(name: str) -> str | None:
    """The section key of a heading or JSON key ("Constraints & Preferences",
    "constraints_and_preferences", "关键决策", "3. Next steps:"), or None."""
    text = name.strip().lower().replace("&", " and ").replace("_", " ").replace("-", " ")
    text = re.sub(r"[^\w\s]", " ", text)
    text = " ".join(text.split())
    text = _NUMBERING.sub("", text)
    return _ALIASES.get(text)


def render(summary: StructuredSummary, language: Language) -> str:
    """Markdown: for each section `## <Heading>` then one `- item` line per item
    (`EMPTY_ITEM`, "- (none)" in English, when empty), sections separated by a blank line. Items are
    flattened to one line. Inverse of `parse_summary_markdown`."""
    headings = HEADINGS[language]
    blocks: list[str] = []
    for heading, (_, items) in zip(headings, summary.sections(), strict=True):
        lines = [f"## {heading}"]
        lines.extend(f"- {_one_line(item)}" for item in items)
        if not items:
            lines.append(f"- {EMPTY_ITEM[language]}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def parse_answer(text: str) -> StructuredSummary:
    """The structured summary in an LLM's answer.

    Accepted, in this order: (1) a JSON object with the six `SECTION_KEYS` (values a
    string or a list of strings; spelling variants such as "key_decisions" accepted),
    alone or (2) inside prose and/or a ```json fence (the first "{" from which a whole
    JSON object with section keys parses, i.e. the outermost one); (3) Markdown with
    `#`-headings in English or Chinese (case-insensitive; "Constraints and
    Preferences", "Constraints" and "&" variants accepted; `**Bold**` heading lines
    too). All six sections must be present; they may be empty.

    Raises `SummaryFormatError` naming the missing sections, or saying the answer has
    none (e.g. a greeting).
    """
    obj = extract_json_object(text, lambda o: any(section_key(k) for k in o))
    if obj is not None:
        return _from_mapping(_unwrap(obj))
    return parse_summary_markdown(text)


def parse_summary_markdown(text: str) -> StructuredSummary:
    """The summary in Markdown with section headings (as `render` writes it, or an LLM's
    Markdown answer). Unknown headings end the current section; "(none)" items are
    dropped. Raises `SummaryFormatError` when a section is missing."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        heading = _HEADING.match(raw) or _BOLD_HEADING.match(raw)
        if heading is not None:
            key = section_key(heading.group(1))
            current = found.setdefault(key, []) if key is not None else None
            continue
        if current is None or not raw.strip():
            continue
        bullet = _BULLET.match(raw)
        if bullet is not None:
            current.append(bullet.group(1).strip())
        elif raw[:1].isspace() and current:
            current[-1] = f"{current[-1]} {raw.strip()}"
        else:
            current.append(raw.strip())
    return _build({k: [i for i in v if i.strip().lower() not in _NONE_ITEMS] for k, v in found.items()})


def extract_json_object(text: str, accept: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any] | None:
    """The first JSON object in *text* (bare, in prose, or in a ```json fence) that
    parses whole and for which `accept(obj)` is true (any object when *accept* is None).

    Tries each "{" from the left (at most 200), so the outermost object wins over the
    objects nested in it. Returns None when there is none.
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    tried = 0
    while start != -1 and tried < _MAX_JSON_STARTS:
        tried += 1
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(obj, dict) and (accept is None or accept(obj)):
                return obj
        start = text.find("{", start + 1)
    return None


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """{"summary": {...sections...}} -> the inner object (some models add a wrapper)."""
    if sum(1 for k in obj if section_key(k)) >= 2:
        return obj
    inner = [v for v in obj.values() if isinstance(v, dict) and any(section_key(k) for k in v)]
    return inner[0] if len(inner) == 1 else obj


def _from_mapping(obj: dict[str, Any]) -> StructuredSummary:
    found: dict[str, list[str]] = {}
    for name, value in obj.items():
        key = section_key(str(name))
        if key is not None:
            found.setdefault(key, []).extend(_items(value))
    return _build(found)


def _items(value: Any) -> list[str]:
    """Bullet items of a JSON value: a list's elements, a string's lines (bullets
    stripped), nested objects as compact JSON; "(none)" items dropped."""
    raw: list[str]
    if value is None:
        raw = []
    elif isinstance(value, str):
        raw = [m.group(1) if (m := _BULLET.match(line)) else line for line in value.splitlines()]
    elif isinstance(value, list | tuple):
        raw = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value if v is not None]
    else:
        raw = [json.dumps(value, ensure_ascii=False)]
    out = [_one_line(item) for item in raw]
    return [item for item in out if item.lower() not in _NONE_ITEMS]


_PLACEHOLDERS = frozenset(
    {"none", "n a", "na", "nil", "null", "nothing", "tbd", "unknown", "not applicable", "无", "暂无", "没有", "未知"}
)


def substantive(item: str) -> bool:
    """Whether a summary item says something: not a placeholder ("None.", "N/A", "无。",
    "...", "{}") once punctuation, brackets and case are set aside."""
    words = "".join(ch if ch.isalnum() or ch.isspace() else " " for ch in item).split()
    text = " ".join(words).lower()
    return bool(text) and text not in _PLACEHOLDERS


def _build(found: dict[str, list[str]]) -> StructuredSummary:
    """The summary of the sections *found*. A section the answer leaves out (or sets to
    null) is empty: models omit what they have nothing for, and missing is not malformed.
    Refused: an answer with none of the sections (not a summary), and one whose sections
    all say nothing (it would replace a running summary with a blank skeleton)."""
    if not any(key in found for key in SECTION_KEYS):
        raise SummaryFormatError(f"answer has no sections (expected {', '.join(SECTION_KEYS)})")
    if not any(substantive(item) for items in found.values() for item in items):
        raise SummaryFormatError("answer has the sections but nothing in any of them")
    return StructuredSummary(**{key: tuple(found.get(key, ())) for key in SECTION_KEYS})


def _one_line(item: str) -> str:
    return " ".join(item.split())
