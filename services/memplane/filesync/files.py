"""Reading a memory file of the Markdown view back (pure): its frontmatter and body as
`FileFields`, and what an edit changed against the memory it was rendered from.

The format is the one `memplane.mdview.render.memory_file` writes and AgentScope's
Agentic Memory parser reads: a leading ``---`` block of one-line ``key: value`` fields
(``name``, ``description``, ``type``; ``memplane_id`` and ``memplane_version`` on a
rendered file), then the content. A feedback or project memory's trailing ``**Why:**`` /
``**How to apply:**`` lines are its metadata's ``why`` / ``how_to_apply`` (as rendered).
Anything else is `MalformedFileError`, whose message says what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memplane.domain.models import Memory, MemoryType
from memplane.mdview.names import title
from memplane.mdview.render import describe, memory_file

_FENCE = re.compile(r"\A---[ \t]*\n(?P<head>(?:.*?\n)?)---[ \t]*(?:\n|\Z)", re.DOTALL)
_FIELD = re.compile(r"^(?P<key>\w+)[ \t]*:[ \t]*(?P<value>.*?)[ \t]*$")
_STRUCTURED = (MemoryType.FEEDBACK, MemoryType.PROJECT)
_LABELS = (("why", "Why"), ("how_to_apply", "How to apply"))
_TYPES = ", ".join(t.value for t in MemoryType)


class MalformedFileError(ValueError):
    """A file is not a memory file: the message names the problem (the caller names the
    file)."""


@dataclass(frozen=True)
class FileFields:
    """What a memory file says: the frontmatter fields (every ``key: value`` line, quotes
    around a value removed), its memory *type*, and the *body* after the frontmatter
    (newlines normalised to ``\\n``, leading blank lines and trailing whitespace cut)."""

    fields: dict[str, str]
    type: MemoryType
    body: str

    @property
    def name(self) -> str:
        return self.fields.get("name", "")

    @property
    def description(self) -> str:
        return self.fields.get("description", "")

    @property
    def memplane_id(self) -> str:
        return self.fields.get("memplane_id", "")

    def memplane_version(self) -> int:
        """The ``memplane_version`` field as a number; `MalformedFileError` when absent
        or not a positive integer."""
        raw = self.fields.get("memplane_version", "")
        if not raw.isdigit() or int(raw) < 1:
            raise MalformedFileError(f"memplane_version {raw!r} is not a positive integer")
        return int(raw)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def parse_file(data: bytes) -> FileFields:
    """The fields of a memory file's bytes. Raises `MalformedFileError` for bytes that are
    not UTF-8, no leading ``---`` block (or one never closed), a frontmatter line that is
    not ``key: value``, a missing ``name`` or ``type``, an unknown type, or an empty body."""
    try:
        text = data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        raise MalformedFileError(f"is not UTF-8 text (byte {exc.start})") from None
    match = _FENCE.match(text)
    if not match:
        raise MalformedFileError("has no frontmatter: it must start with a '---' line and close it with another")
    fields: dict[str, str] = {}
    for number, line in enumerate(match.group("head").split("\n"), start=2):
        if not line.strip():
            continue
        field = _FIELD.match(line)
        if not field:
            raise MalformedFileError(f"frontmatter line {number} {line.strip()[:60]!r} is not 'key: value'")
        fields[field.group("key")] = _unquote(field.group("value"))
    for key in ("name", "type"):
        if not fields.get(key):
            raise MalformedFileError(f"frontmatter has no {key!r} field")
    try:
        kind = MemoryType(fields["type"].lower())
    except ValueError:
        raise MalformedFileError(f"type {fields['type']!r} is not one of {_TYPES}") from None
    body = text[match.end() :].lstrip("\n").rstrip()
    if not body:
        raise MalformedFileError("has no content after the frontmatter")
    return FileFields(fields, kind, body)


def split_structured(body: str, kind: MemoryType) -> tuple[str, dict[str, str]]:
    """*body* without its trailing ``**Why:**`` / ``**How to apply:**`` lines (for a
    feedback or project memory), and those lines' values by metadata key."""
    if kind not in _STRUCTURED:
        return body, {}
    lines = body.split("\n")
    found: dict[str, str] = {}
    while lines:
        for key, label in _LABELS:
            prefix = f"**{label}:**"
            if lines[-1].startswith(prefix) and key not in found:
                found[key] = lines.pop()[len(prefix) :].strip()
                break
        else:
            break
    return "\n".join(lines).rstrip(), found


def new_memory_parts(parsed: FileFields) -> tuple[str, dict[str, str]]:
    """The content and metadata (``why`` / ``how_to_apply``) of a new memory written as
    the file *parsed*."""
    return split_structured(parsed.body, parsed.type)


@dataclass(frozen=True)
class Edit:
    """What an edited file changes on its memory: the update mask (proto field names)
    and the new values, *metadata* the whole new metadata object (it is replaced)."""

    mask: list[str]
    name: str
    description: str
    type: MemoryType
    content: str
    metadata: dict[str, Any]


def _rendered_body(memory: Memory) -> str:
    return parse_file(memory_file(memory).encode()).body


def _body_change(memory: Memory, parsed: FileFields) -> tuple[str, dict[str, Any]]:
    """The content and metadata *parsed*'s body gives *memory* (its own when the body is
    as rendered, or differs only in whitespace around the content)."""
    metadata = dict(memory.metadata)
    if parsed.body == _rendered_body(memory):
        return memory.content, metadata
    appended = memory.type in _STRUCTURED and not any(f"**{label}:**" in memory.content for _, label in _LABELS)
    content, extra = split_structured(parsed.body, memory.type) if appended else (parsed.body, {})
    if appended:
        for key, _ in _LABELS:
            if key in extra:
                metadata[key] = extra[key]
            elif isinstance(metadata.get(key), str):
                del metadata[key]  # its line was deleted from the file
    return (memory.content if content.strip() == memory.content.strip() else content), metadata


def diff(memory: Memory, parsed: FileFields, marks: dict[str, Any]) -> Edit | None:
    """The change *parsed* (an edit of *memory*'s file) makes to *memory*, comparing each
    field with what the render of *memory* shows (so a field the file shows derived, such
    as a description taken from the content, changes only when edited); None when the
    edit changes nothing. *marks* are merged into the metadata of a real change."""
    mask: list[str] = []
    name = parsed.name if parsed.name != title(memory) else memory.name
    if name != memory.name:
        mask.append("name")
    description = parsed.description if parsed.description != describe(memory) else memory.description
    if description != memory.description:
        mask.append("description")
    if parsed.type != memory.type:
        mask.append("type")
    content, metadata = _body_change(memory, parsed)
    if content != memory.content:
        mask.append("content")
    if metadata != memory.metadata:
        mask.append("metadata")
    if not mask:
        return None
    if "metadata" not in mask:
        mask.append("metadata")
    return Edit(mask, name, description, parsed.type, content, {**metadata, **marks})
