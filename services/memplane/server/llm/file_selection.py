"""The file-selection call (AgentScope Agentic Memory's relevance retrieval): a query and
a manifest of memory files -> the names of at most *max_files* of them, as the LLM is
asked for them and as its answer is read. Used by RetrievalService's SelectMemoryFiles.

The prompt is AgentScope's (`DEFAULT_RETRIEVAL_INSTRUCTIONS` of
`agentscope.middleware.AgenticMemoryMiddleware`, its limit of 5 as *max_files*) with the
answer's shape spelled out, and the manifest in its layout, one line per file:
``- [type] file.md (YYYY-MM-DD): description`` (the date of the last update).

The answer must be the object ``{"selected_files": ["file.md", ...]}`` (AgentScope's
`_MemorySelection`), read with `memplane.server.llm.repair.parse_object` (a ```json fence or
prose around it is tolerated, as everywhere answers are read); anything else — no such
object, a non-list, a non-string entry — is an `LLMError` naming what was wrong, never a
guess at names in prose. Which names are known is the caller's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memplane.server.llm.chat import LLMError
from memplane.server.llm.repair import parse_object

DESCRIPTION_PROMPT_CHARS = 400
"""A description is shown to the model up to this many characters (AgentScope reads at
most 256 tokens of a file's frontmatter)."""
MAX_ANSWER_NAMES = 100
"""Entries of `selected_files` read at most (the rest are ignored unread)."""

SELECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"selected_files": {"type": "array", "items": {"type": "string"}}},
    "required": ["selected_files"],
}

_INSTRUCTIONS = (
    "You are selecting memory files that will be useful as context for "
    "processing a user's query. You will be given the user's query and a "
    "list of available memory files with their filenames and descriptions.\n\n"
    "Return a list of filenames for the memories that will clearly be "
    "useful (up to {max_files}). Only include memories that you are certain will be "
    "helpful based on their name and description.\n"
    "- If you are unsure whether a memory will be useful, do not include "
    "it. Be selective and discerning.\n"
    "- If no memories would clearly be useful, return an empty list.\n\n"
    'Answer with one JSON object and nothing else: {{"selected_files": ["<filename>", ...]}}, '
    "each filename exactly as listed."
)


@dataclass(frozen=True)
class ManifestEntry:
    """One offered file: its name (``feedback_x_3f2a9c1e.md``), memory type, last update
    and one-line description."""

    file_name: str
    type: str
    updated_at: datetime
    description: str


def manifest_line(entry: ManifestEntry) -> str:
    """``- [type] file.md (YYYY-MM-DD): description`` (description cut to
    `DESCRIPTION_PROMPT_CHARS`)."""
    description = entry.description
    if len(description) > DESCRIPTION_PROMPT_CHARS:
        description = description[: DESCRIPTION_PROMPT_CHARS - 1].rstrip() + "…"
    tail = f": {description}" if description else ""
    return f"- [{entry.type}] {entry.file_name} ({entry.updated_at.strftime('%Y-%m-%d')}){tail}"


def selection_messages(query: str, entries: Sequence[ManifestEntry], max_files: int) -> list[dict[str, str]]:
    """The chat messages (system: the instructions; user: the query and the manifest)."""
    manifest = "\n".join(manifest_line(e) for e in entries)
    return [
        {"role": "system", "content": _INSTRUCTIONS.format(max_files=max_files)},
        {"role": "user", "content": f"Query: {query}\n\nAvailable memories:\n{manifest}"},
    ]


def _shaped(obj: dict[str, Any]) -> bool:
    names = obj.get("selected_files")
    return isinstance(names, list) and all(isinstance(n, str) for n in names)


def parse_selection(text: str) -> list[str]:
    """The names of ``{"selected_files": [...]}`` in *text*, in order, de-duplicated
    (first kept), stripped, at most `MAX_ANSWER_NAMES`. Raises `LLMError` when the
    answer holds no such object (a list that is not of strings included)."""
    parsed = parse_object(text, _shaped)
    if parsed is None:
        raise LLMError('answer is not a {"selected_files": [<file name>, ...]} object')
    names: dict[str, None] = {}
    for name in parsed.value["selected_files"][:MAX_ANSWER_NAMES]:
        if name.strip():
            names.setdefault(name.strip(), None)
    return list(names)
