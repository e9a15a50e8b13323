"""Stable, readable file names of memories in the Markdown view: ``<type>_<slug>_<id8>.md``
(``feedback_run-tests-before-pushing_3f2a9c1e.md``). The same memory with the same name
always gets the same file name; the id prefix keeps names unique and lets a person see
which memory a file is. Pure string functions."""

from __future__ import annotations

import re
import unicodedata

from memplane.domain.models import Memory

SLUG_MAX_CHARS = 48
_NOT_WORD = re.compile(r"[^\w]+")
_WORDS = 8  # words of the content that name a memory without a name


def slug(text: str) -> str:
    """*text* as a file-name part: NFKC, lower case, runs of anything but letters and
    digits (any script: CJK stays readable) as one "-", at most `SLUG_MAX_CHARS`
    characters, never empty ("memory")."""
    words = _NOT_WORD.sub("-", unicodedata.normalize("NFKC", text).lower().replace("_", "-")).strip("-")
    return words[:SLUG_MAX_CHARS].rstrip("-") or "memory"


def title(memory: Memory) -> str:
    """The memory's name, or the first words of its content when it has none; one line."""
    return one_line(memory.name) or " ".join(memory.content.split()[:_WORDS])


def one_line(text: str) -> str:
    """*text* with every run of whitespace (newlines included) as one space: frontmatter
    values and index entries are one line each."""
    return " ".join(text.split())


def file_name(memory: Memory, *, id_chars: int = 8) -> str:
    """``<type>_<slug of the title>_<first id_chars hex digits of the id>.md``."""
    short = memory.id.replace("-", "")[:id_chars]
    return f"{memory.type.value}_{slug(title(memory))}_{short}.md"


def file_names(memories: list[Memory]) -> dict[str, str]:
    """Memory id -> file name for *memories*; where two share a name (an id prefix
    collision), both use their full id instead."""
    names = {m.id: file_name(m) for m in memories}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {m.id: file_name(m, id_chars=32) if counts[names[m.id]] > 1 else names[m.id] for m in memories}
