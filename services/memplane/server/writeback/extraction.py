"""What the LLM is asked to reconcile in a write-back extraction job, and how its answer
is read; the extraction call before it (call 1) is `memplane.server.llm.extraction`, shared with
SummarizeSession, and its names are importable from here too.

Two calls per job (mem0's extract-then-update shape):
1. `extraction_prompt` (`memplane.server.llm.extraction`): the conversation span -> durable
   memories of six types with speaker, dates and provenance, and forget requests.
2. `reconciliation_prompt`: those facts beside the nearest stored memories of the same
   scope, numbered [1], [2], ... (small ordinals: a model copies "3" reliably, a UUID
   not; ids never reach the model) -> one operation per fact: ADD, UPDATE, SUPERSEDE,
   DELETE (only for an explicit forget request) or NOOP.

Answers are read with `memplane.server.llm.repair.parse_object`; an answer that holds no
object of the expected shape is an `LLMError` (the job fails visibly, never drops a
fact silently).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memplane.domain.models import Memory
from memplane.server.llm.chat import LLMError
from memplane.server.llm.extraction import (
    EXTRACTED_TYPES,
    FACTS_SCHEMA,
    MAX_FACTS,
    MESSAGE_PROMPT_CHARS,
    Extraction,
    Fact,
    ForgetRequest,
    extraction_prompt,
    language_of,
    parse_extraction,
    prompt_sha256,
    session_time,
)
from memplane.server.llm.repair import parse_object

__all__ = [
    "EXTRACTED_TYPES",
    "FACTS_SCHEMA",
    "MAX_FACTS",
    "MESSAGE_PROMPT_CHARS",
    "OPERATIONS",
    "OPERATIONS_SCHEMA",
    "Extraction",
    "Fact",
    "ForgetRequest",
    "Operation",
    "extraction_prompt",
    "language_of",
    "parse_extraction",
    "parse_operations",
    "prompt_sha256",
    "reconciliation_prompt",
    "session_time",
]

OPERATIONS = ("ADD", "UPDATE", "SUPERSEDE", "DELETE", "NOOP")

OPERATIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "operation": {"type": "string", "enum": list(OPERATIONS)},
                    "fact": {"type": ["integer", "null"]},
                    "memory": {"type": ["integer", "null"]},
                },
                "required": ["operation"],
            },
        }
    },
    "required": ["operations"],
}


@dataclass(frozen=True)
class Operation:
    """One reconciliation operation as the model wrote it (ordinals, unchecked)."""

    operation: str
    fact: int | None
    memory: int | None


def reconciliation_prompt(
    facts: Sequence[Fact], forget: Sequence[ForgetRequest], stored: Sequence[Memory]
) -> list[dict[str, str]]:
    """The chat messages of call 2: *facts* (F1, F2, ...) and *forget* requests (R1, ...)
    beside *stored* memories numbered [1], [2], ... in the order given."""
    system = "\n".join(
        [
            "You keep an AI assistant's long-term memory current. Stored memories are numbered [1], [2], ...;"
            " newly extracted facts F1, F2, ...; the user's explicit requests to forget R1, R2, ....",
            "",
            'Answer with ONE JSON object and nothing else: {"operations": [{"operation": ..., "fact": <n of'
            ' Fn or null>, "memory": <n of [n] or null>}, ...]}, one operation per fact:',
            '- "ADD" (fact): the fact is new; nothing stored says it.',
            '- "NOOP" (fact, memory): the memory already says it; nothing changes.',
            '- "UPDATE" (fact, memory): the fact refines the same memory (more detail, a correction of'
            " the same thing); the memory is rewritten to the fact.",
            '- "SUPERSEDE" (fact, memory): the world changed: the fact replaces the memory about the SAME'
            " subject and the SAME attribute (a move replaces the old address, a new owner the old owner)."
            " The old memory stays in history as no longer valid. A new hobby does not replace an old one;"
            " a second trip does not replace the first: those are ADD.",
            '- "DELETE" (memory): ONLY for a forget request R: the memory it names is deleted. Never delete'
            " for any other reason.",
            "Use only the numbers shown. When in doubt between ADD and SUPERSEDE, choose ADD.",
        ]
    )
    lines = ["Stored memories:", "<memories>"]
    lines += [
        f"[{i}] ({m.type.value}, since {m.valid_from:%Y-%m-%d}) {m.name}: {m.content}" for i, m in _numbered(stored)
    ]
    lines += ["</memories>", "", "New facts:", "<facts>"]
    lines += [
        f"F{f.index} ({f.type.value}, said by {f.speaker}"
        + (f", since {f.valid_from:%Y-%m-%d}" if f.valid_from else "")
        + f") {f.name}: {f.content}"
        for f in facts
    ]
    lines += ["</facts>"]
    if forget:
        lines += ["", "Forget requests:", "<forget>", *(f"R{r.index} {r.content}" for r in forget), "</forget>"]
    lines += ["", "Return the JSON object now."]
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


def parse_operations(text: str) -> tuple[list[Operation], tuple[str, ...]]:
    """Operations in call 2's answer (ordinals as written; checking them is the
    caller's) and the repairs the JSON needed. Raises `LLMError` when the answer holds
    no {"operations": [...]} object."""
    parsed = parse_object(text, lambda o: isinstance(o.get("operations"), list))
    if parsed is None:
        raise LLMError('answer has no {"operations": [...]} object')
    out = []
    for item in parsed.value["operations"]:
        if isinstance(item, dict):
            op = str(item.get("operation") or item.get("event") or "").strip().upper()
            out.append(Operation(op, _ordinal(item.get("fact")), _ordinal(item.get("memory"))))
    return out, parsed.repairs


def _ordinal(value: Any) -> int | None:
    """3, "3", "[3]", "F3" -> 3; anything else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value or "").strip().strip("[]").lstrip("FfRr")
    return int(text) if text.isdigit() else None


def _numbered(stored: Sequence[Memory]) -> list[tuple[int, Memory]]:
    return list(enumerate(stored, start=1))
