"""Cutting long tool outputs and reading them back (ReMe's compact_tool_result and its
tool_result/ folder), as pure functions: no I/O, no clock.

Units everywhere: sizes in UTF-8 bytes; lines 1-based and split on "\\n" only (a
"\\r\\n" ending stays with its line, see `memplane.domain.blobs.count_lines`); columns
0-based in Unicode code points from the start of the line.

The flow of CompactToolResults for one tool_result block with limit L (`plan_limits`):

1. when `claimed_cut(block)` gives (head, truncation) (a structured `Truncation`, or our
   `marker` at the end of its output) AND the blob store confirms it
   (`ToolResultBlobStore.verify(conn, workspace, truncation.ref, head, now=...)`: the
   ref is an unexpired blob of THIS workspace and head is a prefix of its content):
   `recut(block, L)`. Such an output is never stored again nor marked twice; its head
   is cut further only when L shrank.
2. when the claim is not confirmed (a forged or accidental marker, another workspace's
   ref — e.g. a sub-agent's cut output passed on —, an expired blob, an edited head):
   the claim is ignored and the WHOLE output, marker text included, is a new output
   (step 3 or 4), so no byte of it is lost.
3. else, when `utf8_size(output) <= L`, or cutting would save no more than the marker
   adds (`worth_cutting` false): unchanged.
4. else `c = cut(output, L)`, store `output` whole as a blob (ref, expires_at; the store
   returns the existing blob for an identical output of the same scope), and replace it
   with `c.head + marker(c.truncation(ref, expires_at))`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from memplane.domain.blobs import count_lines, utf8_size
from memplane.domain.context import ContextMessage, ToolResultBlock, Truncation

# Smallest `max_bytes` for `read`: the longest UTF-8 character, so that every call
# makes progress (a reader looping on next_line / next_column always reaches the end).
MIN_READ_BYTES = 4

_NEWLINE = 0x0A
_CARRIAGE_RETURN = 0x0D


# --------------------------------------------------------------------------- cutting


@dataclass(frozen=True)
class Cut:
    """The kept head of a text and where the rest starts.

    `kept_bytes` is `utf8_size(head)`; `resume_line` (1-based) and `resume_column`
    (0-based code points) address the first character not kept — both 0 when nothing was
    cut (`is_cut` false). `total_bytes` / `total_lines` describe the whole text."""

    head: str
    kept_bytes: int
    resume_line: int
    resume_column: int
    total_bytes: int
    total_lines: int

    @property
    def is_cut(self) -> bool:
        """Whether anything was left out."""
        return self.kept_bytes < self.total_bytes

    def truncation(self, *, ref: str, expires_at: datetime) -> Truncation:
        """The `Truncation` of this cut for the whole text stored as blob *ref*."""
        return Truncation(
            ref=ref,
            total_bytes=self.total_bytes,
            total_lines=self.total_lines,
            kept_bytes=self.kept_bytes,
            resume_line=self.resume_line,
            resume_column=self.resume_column,
            expires_at=expires_at,
        )


def _cut_point(data: bytes, max_bytes: int) -> int:
    """Byte offset at which to cut the UTF-8 *data* (which is longer than *max_bytes*).

    Whole lines are kept when they fill at least half of *max_bytes*; otherwise (no line
    ends within the limit, or the last one ends early and a long line follows) the cut
    falls inside the next line at the largest character boundary <= max_bytes, never
    between "\\r" and "\\n". So a 300 KB one-line JSON keeps its first max_bytes bytes
    and a short header line does not hide the long line after it."""
    line_end = data.rfind(b"\n", 0, max_bytes) + 1
    if line_end > 0 and 2 * line_end >= max_bytes:
        return line_end
    pos = max_bytes
    while pos > line_end and data[pos] & 0xC0 == 0x80:  # inside a multi-byte character
        pos -= 1
    if pos > line_end and data[pos] == _NEWLINE and data[pos - 1] == _CARRIAGE_RETURN:
        pos -= 1  # keep "\r\n" together
    return pos


def _position(data: bytes, end: int, first_line: int, first_column: int) -> tuple[int, int]:
    """(line, column) of byte offset *end* of *data*, where *data* starts at
    (first_line, first_column)."""
    newlines = data.count(b"\n", 0, end)
    if newlines == 0:
        return first_line, first_column + len(data[:end].decode("utf-8"))
    line_start = data.rfind(b"\n", 0, end) + 1
    return first_line + newlines, len(data[line_start:end].decode("utf-8"))


def cut(text: str, max_bytes: int) -> Cut:
    """The head of *text* that fits in *max_bytes* UTF-8 bytes, O(len(text)).

    The head is the longest prefix made of whole lines (endings kept) that fits, as long
    as it fills at least half of *max_bytes*. When no whole line fits, or the whole lines
    that fit are shorter than half the limit because a long line follows, the head also
    takes the start of that line, cut at the largest character boundary <= max_bytes
    (never inside a character, never between "\\r" and "\\n"): a long line is never
    dropped, a 300 KB one-line JSON keeps its first max_bytes bytes, and resume_column
    says where in the line the kept text stops. Text that fits is returned whole
    (`is_cut` false). The marker that follows a cut head (`marker`) is not counted in
    *max_bytes*. Raises `ValueError` for a negative *max_bytes*.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    data = text.encode("utf-8")
    total_lines = count_lines(text)
    if len(data) <= max_bytes:
        return Cut(text, len(data), 0, 0, len(data), total_lines)
    end = _cut_point(data, max_bytes)
    line, column = _position(data, end, 1, 0)
    return Cut(data[:end].decode("utf-8"), end, line, column, len(data), total_lines)


# --------------------------------------------------------------------------- the marker

_MARKER_RE = re.compile(
    r"\n\[memplane: tool output cut at (?P<kept>[0-9,]+) of (?P<total>[0-9,]+) bytes"
    r" \(line (?P<line>[0-9]+) of (?P<lines>[0-9]+)\)\. Full output: tool result"
    r" ref=(?P<ref>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}),"
    r" kept until (?P<until>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)\."
    r" Read the rest with ReadToolResult\(ref, start_line=(?P<start_line>[0-9]+),"
    r" start_column=(?P<start_column>[0-9]+)\)\.\]\Z"
)


def marker(truncation: Truncation) -> str:
    """The line appended to a cut output, so that a model — and a client that lost the
    structured `truncation` field, e.g. through OpenAI dicts — sees what happened:

        \\n[memplane: tool output cut at 102,400 of 312,345 bytes (line 1 of 1). Full
        output: tool result ref=<uuid>, kept until 2026-12-03T10:00:00Z. Read the rest
        with ReadToolResult(ref, start_line=1, start_column=102400).]

    (one line; it starts with "\\n"). Its bytes are not counted in the limit the head
    was cut to. `expires_at` is shown to the second (UTC); `split_marker` reads it back
    to that precision. The ref must be a UUID in canonical lower-case form.
    """
    until = truncation.expires_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"\n[memplane: tool output cut at {truncation.kept_bytes:,} of {truncation.total_bytes:,} bytes"
        f" (line {truncation.resume_line} of {truncation.total_lines}). Full output: tool result"
        f" ref={truncation.ref}, kept until {until}. Read the rest with ReadToolResult(ref,"
        f" start_line={truncation.resume_line}, start_column={truncation.resume_column}).]"
    )


def split_marker(output: str) -> tuple[str, Truncation] | None:
    """(head, truncation) of an *output* that ends with our `marker`, else None.

    The truncation is rebuilt from the marker's text alone (`expires_at` to the second),
    for clients that dropped the structured field. This is only what the text CLAIMS:
    any tool can print a well-formed marker (by accident, by copying one, or to make
    memplane drop the rest of its output), so never trust it without
    `ToolResultBlobStore.verify` (see `claimed_cut`)."""
    found = _MARKER_RE.search(output)
    if found is None:
        return None
    truncation = Truncation(
        ref=found["ref"],
        total_bytes=int(found["total"].replace(",", "")),
        total_lines=int(found["lines"]),
        kept_bytes=int(found["kept"].replace(",", "")),
        resume_line=int(found["start_line"]),
        resume_column=int(found["start_column"]),
        expires_at=datetime.strptime(found["until"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC),
    )
    return output[: found.start()], truncation


def render(head: str, truncation: Truncation) -> str:
    """The output of a cut tool result: its head followed by its `marker`."""
    return head + marker(truncation)


def claimed_cut(block: ToolResultBlock) -> tuple[str, Truncation] | None:
    """(head, truncation) of a block that claims CompactToolResults cut it before, else
    None. Nothing is verified here (no I/O): the caller must confirm the claim with
    `ToolResultBlobStore.verify(conn, workspace, truncation.ref, head, now=...)` before
    `recut`-ting the block, and on failure treat the whole output (marker text
    included) as new — store it and `cut` it.

    The claim comes from the structured `truncation` field when present (it wins: it has
    the exact expiry), with head = the output before its trailing `marker` (the whole
    output when there is none); else from the marker at the end of the output
    (`split_marker`), head = the text before it. The head is the text that must be a
    prefix of the stored blob."""
    found = split_marker(block.output)
    if block.truncation is not None:
        return (block.output if found is None else found[0]), block.truncation
    return found


# A stand-in ref and expiry for sizing a marker: a canonical UUID and a second-precision
# time always print as 36 and 20 characters.
_SAMPLE_REF = "00000000-0000-0000-0000-000000000000"
_SAMPLE_EXPIRY = datetime(2000, 1, 1, tzinfo=UTC)


def worth_cutting(text: str, max_bytes: int) -> bool:
    """Whether cutting *text* to *max_bytes* UTF-8 bytes saves bytes: True only when the
    bytes `cut` removes exceed the UTF-8 size of the `marker` that replaces them
    (computed exactly for this text and limit, with a stand-in ref and expiry, which
    always print at the same length). False when *text* fits in *max_bytes* or when the
    cut output (head + marker, about 230 bytes of marker) would be no smaller than
    *text* — e.g. any limit within ~230 bytes of the size, or a limit of 1 byte on a
    short output — then the output is better left whole (and nothing stored).
    O(len(text)). Raises `ValueError` for a negative *max_bytes*."""
    return profitable_cut(text, max_bytes) is not None


def profitable_cut(text: str, max_bytes: int) -> Cut | None:
    """`cut(text, max_bytes)` when it is `worth_cutting`, else None (the cut is made once
    and handed to the caller, which stores the text and renders the head)."""
    c = cut(text, max_bytes)
    if not c.is_cut:
        return None
    cost = utf8_size(marker(c.truncation(ref=_SAMPLE_REF, expires_at=_SAMPLE_EXPIRY)))
    return c if c.total_bytes - c.kept_bytes > cost else None


# --------------------------------------------------------------------------- recutting


@dataclass(frozen=True)
class Recut:
    """An output that was cut before, fitted to a new limit.

    `output` is the new text of the block (head + marker), `truncation` its structured
    form (same ref, total sizes and expiry as before), `changed` whether the head was
    cut further."""

    output: str
    truncation: Truncation
    changed: bool


def recut_output(output: str, truncation: Truncation | None, max_bytes: int) -> Recut | None:
    """Fit an output that CompactToolResults cut before to *max_bytes*; None when
    *output* was never cut (no *truncation* given and no marker at its end) — cut and
    store it then.

    A cut output is never stored again and never gets a second marker. When its kept
    head (the text before the marker; all of *output* when a *truncation* is given
    without a marker) fits in *max_bytes*, it is returned unchanged. When the limit
    became smaller (the message left the recent window), the head is cut again with
    `cut` and the marker rewritten with the same ref and the new resume position. The
    head is a prefix of the stored output, so positions in the head are positions in
    the whole. A given *truncation* wins over the marker's text (it has the exact
    expiry). Raises `ValueError` for a negative *max_bytes*.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    found = split_marker(output)
    if truncation is None:
        if found is None:
            return None
        head, truncation = found
    else:
        head = output if found is None else found[0]
    if utf8_size(head) <= max_bytes:
        return Recut(output, truncation, changed=False)
    again = cut(head, max_bytes)
    new = Truncation(
        ref=truncation.ref,
        total_bytes=truncation.total_bytes,
        total_lines=truncation.total_lines,
        kept_bytes=again.kept_bytes,
        resume_line=again.resume_line,
        resume_column=again.resume_column,
        expires_at=truncation.expires_at,
    )
    return Recut(render(again.head, new), new, changed=True)


def recut(block: ToolResultBlock, max_bytes: int) -> ToolResultBlock:
    """`recut_output` for a block whose cut was verified (`claimed_cut` +
    `ToolResultBlobStore.verify`): the block itself when its head fits
    in *max_bytes* (with `truncation` filled in from the marker when a client had
    dropped it; the output text unchanged), else a copy whose head is cut to *max_bytes*
    with a rewritten marker and truncation (same ref). Raises `ValueError` when the
    block was never cut (cut it with `cut` and store it instead) or for a negative
    *max_bytes*."""
    result = recut_output(block.output, block.truncation, max_bytes)
    if result is None:
        raise ValueError("recut: the tool output was never cut")
    if not result.changed and block.truncation is not None:
        return block
    return replace(block, output=result.output, truncation=result.truncation)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class ReadSlice:
    """A piece of a stored output: `text`, where to continue (`next_line` 1-based,
    `next_column` 0-based code points; next_line 0 when the end was reached) and the
    number of lines of the whole output."""

    text: str
    next_line: int
    next_column: int
    total_lines: int


def _line_start(text: str, line: int) -> int:
    """Code-point offset where 1-based *line* (at most count_lines(text)) starts."""
    offset = 0
    for _ in range(line - 1):
        offset = text.find("\n", offset) + 1
    return offset


def _check_read(start_line: int, start_column: int, line_count: int, max_bytes: int) -> None:
    if start_line < 1:
        raise ValueError(f"start_line must be >= 1, got {start_line}")
    if start_column < 0:
        raise ValueError(f"start_column must be >= 0, got {start_column}")
    if line_count < 0:
        raise ValueError(f"line_count must be >= 0, got {line_count}")
    if max_bytes < MIN_READ_BYTES:
        raise ValueError(f"max_bytes must be >= {MIN_READ_BYTES}, got {max_bytes}")


def read(text: str, *, start_line: int, start_column: int, line_count: int, max_bytes: int) -> ReadSlice:
    """Up to *line_count* lines of *text* (0: no line limit) from *start_line* (1-based)
    at *start_column* (0-based code points), at most *max_bytes* UTF-8 bytes, O(len(text)).
    The rest of a line started inside counts as one of the *line_count* lines.

    A piece that does not fit in *max_bytes* is cut as `cut` cuts: at a line boundary
    when the whole lines fill at least half of *max_bytes*, else inside a line
    (`next_column` > 0 then). Reading on from (next_line, next_column) until next_line is
    0 and concatenating gives the text back exactly; so does the head of a `Cut`
    followed by reads from its (resume_line, resume_column).

    Range rules: start_line may be total_lines + 1 with start_column 0 (just past the
    end: empty text, next_line 0), so an empty output reads as "" at line 1 and a reader holding its own
    cursor may ask once more at the end; start_column may be up to the length of the
    line including its ending (at the ending's end it reads on from the next line).
    Raises `ValueError` whose message starts with the field name: `start_line` below 1
    or beyond total_lines + 1, `start_column` negative or beyond its line,
    `line_count` negative, `max_bytes` below `MIN_READ_BYTES` (4, the longest UTF-8
    character, so every read makes progress).
    """
    _check_read(start_line, start_column, line_count, max_bytes)
    total_lines = count_lines(text)
    if start_line > total_lines + 1:
        raise ValueError(f"start_line {start_line} is beyond the end ({total_lines} lines)")
    if start_line == total_lines + 1:
        if start_column:
            raise ValueError(f"start_column must be 0 past the last line, got {start_column}")
        return ReadSlice("", 0, 0, total_lines)
    line_start = _line_start(text, start_line)
    line_end = text.find("\n", line_start)
    line_length = (line_end + 1 if line_end >= 0 else len(text)) - line_start
    if start_column > line_length:
        raise ValueError(f"start_column {start_column} is beyond line {start_line} ({line_length} code points)")
    begin = line_start + start_column
    if line_end >= 0 and begin == line_end + 1:  # just after the line ending: the next line
        start_line, start_column = start_line + 1, 0
    end = len(text)
    if line_count:
        end = begin
        for _ in range(line_count):
            found = text.find("\n", end)
            end = len(text) if found < 0 else found + 1
            if found < 0:
                break
    # Each code point takes at least one byte, so more than max_bytes + 1 code points
    # never fit: a huge stored output is never encoded whole for a small read.
    data = text[begin : min(end, begin + max_bytes + 1)].encode("utf-8")
    stop = len(data) if len(data) <= max_bytes else _cut_point(data, max_bytes)
    piece = data[:stop].decode("utf-8")
    if begin + len(piece) == len(text):
        return ReadSlice(piece, 0, 0, total_lines)
    next_line, next_column = _position(data, stop, start_line, start_column)
    return ReadSlice(piece, next_line, next_column, total_lines)


# --------------------------------------------------------------------------- planning


def plan_limits(
    messages: Sequence[ContextMessage], *, recent_max_bytes: int, old_max_bytes: int, keep_last_messages: int
) -> list[int]:
    """The byte limit for the tool outputs of each message, in message order.

    Recent messages get *recent_max_bytes*: those of the current turn (from the newest
    user message with text on; every message when there is no such user message, since
    nothing marks an earlier turn) and the last *keep_last_messages* messages (negative
    means none; the service resolves the proto's 0 to 3 before calling). Older messages
    get *old_max_bytes*. This is ReMe's compact_tool_result: the first call cuts an
    output to the recent limit and stores it; once it leaves the recent window a later
    call cuts its head further to the old limit (`recut`).

    The last N messages are never cut below the recent limit — but they are cut to it:
    an output over 100 KB would hardly fit a model call anyway, and ReMe truncates the
    newest output on its first call too. The rest of such an output stays readable with
    ReadToolResult.

    An *old_max_bytes* above *recent_max_bytes* is lowered to it: older outputs never
    keep more than newer ones (a caller that sets only a small recent limit, leaving the
    old one at its 3 KB default, gets every output cut to the recent limit).

    Raises `ValueError` naming the field for a limit below 1.
    """
    if recent_max_bytes < 1:
        raise ValueError(f"recent_max_bytes must be >= 1, got {recent_max_bytes}")
    if old_max_bytes < 1:
        raise ValueError(f"old_max_bytes must be >= 1, got {old_max_bytes}")
    old_max_bytes = min(old_max_bytes, recent_max_bytes)
    count = len(messages)
    turn_start = next((i for i in range(count - 1, -1, -1) if messages[i].opens_user_turn()), 0)
    recent_from = min(turn_start, count - max(keep_last_messages, 0))
    return [recent_max_bytes if i >= recent_from else old_max_bytes for i in range(count)]
