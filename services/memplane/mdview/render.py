"""Rendering a workspace's memories as AgentScope's Agentic Memory files (pure: memories
in, file texts out).

- ``Memory/<type>_<slug>_<id8>.md`` — one per current memory of every type but episodic:
  frontmatter ``name``, ``description``, ``type`` (one line each, as AgentScope's parser
  reads them) and ``memplane_id`` / ``memplane_version`` (what a sync maps an edit back
  with), then the content; for feedback and project memories the metadata's ``why`` and
  ``how_to_apply`` strings, when present and not already in the content, follow as
  **Why:** and **How to apply:** lines (nothing is made up when they are absent).
- ``Memory/MEMORY.md`` — the index, no frontmatter: a journal line, then one line per
  memory file ``- [name](file.md) — description`` (at most `ENTRY_MAX_CHARS` characters),
  most recently updated first, cut to `max_index_tokens` tokens and `INDEX_MAX_LINES`
  lines with a last line saying how many were left out.
- ``Memory/journal/YYYY-MM-DD.md`` — ReMe's daily journal: the episodic memories
  (conversation turns, session summaries) of each UTC day of their ``valid_from`` (a
  turn's time), by session, in time order.

Superseded memories (``valid_to`` passed) and expired ones are not in the view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memplane.domain.models import Memory, MemoryType
from memplane.mdview.names import file_names, one_line, title

MEMORY_DIR = "Memory"
INDEX_FILE = "MEMORY.md"
JOURNAL_DIR = "journal"
INDEX_MAX_TOKENS = 4_000  # AgentScope's memory_max_tokens default
INDEX_MAX_LINES = 200  # AgentScope's instructions: lines after 200 are truncated
ENTRY_MAX_CHARS = 150  # AgentScope's instructions: each index entry under ~150 characters
_STRUCTURED = (MemoryType.FEEDBACK, MemoryType.PROJECT)


@dataclass(frozen=True)
class View:
    """A rendered view: *files* maps sandbox paths (``Memory/MEMORY.md``) to their text;
    *listed* memory files are in the index, *unlisted* ones only on disk (the bound)."""

    files: dict[str, str]
    listed: int
    unlisted: int


def is_current(memory: Memory, now: datetime) -> bool:
    """Whether *memory* is still valid and not expired at *now*."""
    return (memory.valid_to is None or memory.valid_to > now) and (memory.expires_at is None or memory.expires_at > now)


def _frontmatter(fields: Iterable[tuple[str, str]]) -> str:
    return "---\n" + "".join(f"{key}: {one_line(value)}\n" for key, value in fields) + "---\n\n"


def describe(memory: Memory) -> str:
    """The memory's description, or its first line when it has none; one line."""
    return one_line(memory.description) or one_line(memory.content.strip().split("\n", 1)[0])


def memory_file(memory: Memory) -> str:
    """The Markdown file of one memory (frontmatter, then the content)."""
    head = _frontmatter(
        [
            ("name", title(memory)),
            ("description", describe(memory)),
            ("type", memory.type.value),
            ("memplane_id", memory.id),
            ("memplane_version", str(memory.version)),
        ]
    )
    body = memory.content.rstrip("\n")
    if memory.type in _STRUCTURED:
        for key, label in (("why", "Why"), ("how_to_apply", "How to apply")):
            value = memory.metadata.get(key)
            if isinstance(value, str) and value and f"**{label}:**" not in body:
                body += f"\n**{label}:** {one_line(value)}"
    return head + body + "\n"


def _entry(name: str, path: str, description: str) -> str:
    line = f"- [{name}]({path}) — {description}"
    return line if len(line) <= ENTRY_MAX_CHARS else line[: ENTRY_MAX_CHARS - 1].rstrip() + "…"


def index_file(
    entries: Sequence[str], journal_line: str, count_tokens: Callable[[str], int], max_tokens: int
) -> tuple[str, int]:
    """MEMORY.md from *entries* (best first) and the journal line ("" for none), cut to
    *max_tokens* and `INDEX_MAX_LINES`; returns its text and how many entries it lists."""
    lines = [journal_line] if journal_line else []
    budget = max_tokens - sum(count_tokens(line + "\n") for line in lines) - 40  # 40: room for the last line
    listed = 0
    for line in entries:
        cost = count_tokens(line + "\n")
        if cost > budget or len(lines) >= INDEX_MAX_LINES - 1:
            break
        lines.append(line)
        budget -= cost
        listed += 1
    if listed < len(entries):
        lines.append(f"- … {len(entries) - listed} more memory files in this directory, not listed here")
    return "".join(line + "\n" for line in lines), listed


def _speaker(memory: Memory) -> str:
    for key in ("speaker", "role"):
        value = memory.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return describe(memory) if memory.description else "note"


def journal_file(day: str, memories: Sequence[Memory]) -> str:
    """One day's journal: frontmatter, then the *memories* (of that day) by session in
    time order, ``- HH:MM speaker: text`` (later lines of a text indented)."""
    ordered = sorted(memories, key=lambda m: (m.valid_from, m.id))
    sessions: dict[str, list[Memory]] = {}
    for memory in ordered:
        sessions.setdefault(memory.scope.session_id, []).append(memory)
    text = _frontmatter(
        [
            ("name", f"Journal {day}"),
            ("description", f"Conversation turns and session summaries of {day} ({len(ordered)} entries)"),
            ("type", MemoryType.EPISODIC.value),
        ]
    )
    text += f"# {day}\n"
    for session, items in sessions.items():
        text += f"\n## Session {session}\n\n" if session else "\n## No session\n\n"
        for memory in items:
            first, *rest = memory.content.strip("\n").split("\n")
            text += f"- {memory.valid_from.strftime('%H:%M')} {_speaker(memory)}: {first}\n"
            text += "".join(f"  {line}\n" for line in rest)
    return text


def render_view(
    memories: Iterable[Memory],
    *,
    now: datetime,
    count_tokens: Callable[[str], int],
    max_index_tokens: int = INDEX_MAX_TOKENS,
) -> View:
    """The view of *memories* (a workspace's, or a scope's) at *now*; *count_tokens*
    counts the tokens of a text (the workspace's encoding) for the index bound."""
    current = [m for m in memories if is_current(m, now)]
    episodic = [m for m in current if m.type == MemoryType.EPISODIC]
    others = sorted(
        (m for m in current if m.type != MemoryType.EPISODIC), key=lambda m: (m.updated_at, m.id), reverse=True
    )
    names = file_names(others)
    files = {f"{MEMORY_DIR}/{names[m.id]}": memory_file(m) for m in others}
    days: dict[str, list[Memory]] = {}
    for memory in episodic:
        days.setdefault(memory.valid_from.strftime("%Y-%m-%d"), []).append(memory)
    for day, items in days.items():
        files[f"{MEMORY_DIR}/{JOURNAL_DIR}/{day}.md"] = journal_file(day, items)
    journal = (
        f"- [Journal]({JOURNAL_DIR}/) — conversation turns and session summaries, one file per day "
        f"({len(days)} days, newest {max(days)})"
        if days
        else ""
    )
    entries = [_entry(title(m), names[m.id], describe(m)) for m in others]
    index, listed = index_file(entries, journal, count_tokens, max_index_tokens)
    files[f"{MEMORY_DIR}/{INDEX_FILE}"] = index
    return View(files, listed, len(others) - listed)
