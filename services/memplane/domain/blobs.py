"""Stored tool outputs (ReMe's tool_result/ folder): the whole text of a tool output that
CompactToolResults cut, kept for a retention period and read back by ReadToolResult.

Lines are counted the way `memplane.server.compaction.tool_output` numbers them: split on "\\n"
only (a "\\r\\n" ending stays one line ending; a lone "\\r", as progress bars print, does
not start a line), so a blob's `line_count` equals the `total_lines` of its truncation
and of every ReadToolResult answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


def count_lines(text: str) -> int:
    """Number of "\\n"-separated lines of *text*: 0 for "", and a last line without a
    line ending counts as a line ("a\\nb" and "a\\nb\\n" both have 2). Equal to
    `len(text.splitlines())` when the only line breaks are "\\n" and "\\r\\n"."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def utf8_size(text: str) -> int:
    """Size of *text* in UTF-8 bytes."""
    return len(text.encode("utf-8"))


@dataclass(frozen=True)
class StoredBlob:
    """One stored tool output of a workspace.

    `ref` is its reference (a UUID in canonical text form); `byte_size` the UTF-8 size
    of `content` in bytes; `line_count` its lines (`count_lines`); times are aware UTC.
    The blob is readable while `now < expires_at`."""

    ref: str
    content: str
    byte_size: int
    line_count: int
    created_at: datetime
    expires_at: datetime
    tool_use_id: str
    tool_name: str
    session_id: str
