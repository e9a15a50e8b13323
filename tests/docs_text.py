"""The documentation's text for the tests that run its snippets: README.md and the pages
under docs/, read by path and by heading (no fixtures here). A snippet test names the file
and the heading its snippet is under, so moving the text is moving its test."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")


def read(path: str) -> str:
    """The text of *path*, relative to the repository's root (e.g. "docs/guides/compaction.md")."""
    return (REPO / path).read_text(encoding="utf-8")


def _lines_outside_fences(text: str) -> list[tuple[str, bool]]:
    """Each line of *text* with whether it lies outside fenced code (where a `#` is a heading)."""
    out: list[tuple[str, bool]] = []
    fenced = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            out.append((line, False))
        else:
            out.append((line, not fenced))
    return out


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every Markdown heading of *text*, fenced code left out."""
    found: list[tuple[int, str]] = []
    for line, outside in _lines_outside_fences(text):
        match = _HEADING.match(line) if outside else None
        if match:
            found.append((len(match[1]), match[2]))
    return found


def section(path: str, heading: str) -> str:
    """The text under *heading* (its title, at any level) of *path*, up to the next heading of
    the same or a higher level. Raises LookupError naming the file if no heading has that title."""
    lines = _lines_outside_fences(read(path))
    for start, (line, outside) in enumerate(lines):
        match = _HEADING.match(line) if outside else None
        if match and match[2] == heading:
            level = len(match[1])
            body: list[str] = []
            for later, later_outside in lines[start + 1 :]:
                other = _HEADING.match(later) if later_outside else None
                if other and len(other[1]) <= level:
                    break
                body.append(later)
            return "\n".join(body)
    raise LookupError(f"{path} has no heading {heading!r}")


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the ```*language* blocks of *text*, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)
