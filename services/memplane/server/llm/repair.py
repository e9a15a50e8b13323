"""JSON answers read the way models write them, not the way the spec says.

Models asked for one JSON object answer with it wrapped in prose ("Here are the
memories: {...} Let me know ..."), in a ```json fence, with backslashes that are not JSON
escapes (Windows paths "C:\\Users\\ana", "it\\'s"), raw newlines or tabs inside
strings, or a trailing comma before a closing bracket. `parse_object` tries each
```json fence, then the whole text, each as it is and then with the repairs below, and
takes the first object that parses whole and that `accept` takes. The repairs only run
when the plain parse failed, so a well-formed answer is read exactly. A backslash that
happens to form a valid escape ("C:\\notes" holds "\\n") cannot be told from one
meant, and is read as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
# A JSON escape (kept), a \' (a quote needs none), or a lone backslash (doubled).
_ESCAPE = re.compile(r"""\\(?:(["\\/bfnrt]|u[0-9a-fA-F]{4})|(')|)""")
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_MAX_STARTS = 200  # "{" positions tried per text


@dataclass(frozen=True)
class Parsed:
    """An object read from an answer; `repairs` names what had to be fixed (empty when
    the answer parsed as sent): "fence", "prose", "escapes", "trailing_comma"."""

    value: dict[str, Any]
    repairs: tuple[str, ...]


def fix_escapes(text: str) -> str:
    """*text* with every backslash that does not start a JSON escape doubled, and `\\'`
    turned into `'`."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(0)
        if match.group(2) is not None:
            return "'"
        return "\\\\"

    return _ESCAPE.sub(one, text)


def drop_trailing_commas(text: str) -> str:
    """*text* without a comma directly (whitespace aside) before `}` or `]`."""
    return _TRAILING_COMMA.sub(r"\1", text)


def parse_object(text: str, accept: Callable[[dict[str, Any]], bool] | None = None) -> Parsed | None:
    """The first JSON object in *text* that parses whole and passes *accept* (any object
    when None), after the repairs of the module docstring as needed; None when there is
    none. Strings may hold raw control characters (newlines, tabs)."""
    for candidate, how in _candidates(text):
        for repaired, fixes in _repairs(candidate):
            found = _first_object(repaired, accept)
            if found is not None:
                obj, at_start = found
                prose = () if at_start or how else ("prose",)
                return Parsed(obj, (*how, *prose, *fixes))
    return None


def _candidates(text: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    for match in _FENCE.finditer(text):
        yield match.group(1).strip(), ("fence",)
    yield text.strip(), ()


def _repairs(text: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    yield text, ()
    escaped = fix_escapes(text)
    if escaped != text:
        yield escaped, ("escapes",)
    trimmed = drop_trailing_commas(escaped)
    if trimmed != escaped:
        yield trimmed, (("escapes",) if escaped != text else ()) + ("trailing_comma",)


def _first_object(text: str, accept: Callable[[dict[str, Any]], bool] | None) -> tuple[dict[str, Any], bool] | None:
    """(object, whether it starts the text) of the first "{" that decodes to an accepted
    object; the outermost object wins over those nested in it."""
    decoder = json.JSONDecoder(strict=False)
    start = text.find("{")
    tried = 0
    while start != -1 and tried < _MAX_STARTS:
        tried += 1
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(obj, dict) and (accept is None or accept(obj)):
                return obj, start == 0 and not text[end:].strip()
        start = text.find("{", start + 1)
    return None
