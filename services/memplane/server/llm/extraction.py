"""The extraction call: a conversation span -> durable memories, as the LLM is asked for
them and as its answer is read. One prompt and one parser for every path that extracts:
write-back's extraction jobs (`memplane.server.writeback.jobs`, WriteConversation) and
compaction's SummarizeSession (`memplane.server.compaction.session_memory`), so both write the
same kinds of memories.

`extraction_prompt`: the span (each message as `[id] [time] role (name): text`) ->
memories of types user, feedback, project, reference, procedural (ReMe's task memory:
what worked, what failed, under which conditions) and tool (ReMe's tool memory), each
with name, description and content in the conversation's language, who said it (an
assistant's suggestion is not a user fact), the date it became true (absolute, resolved
from the message times) and the message ids it came from; plus the user's explicit
requests to forget something. `from_context` renders an agent's context messages (text,
tool calls, tool outputs) as such a span.

Answers are read with `memplane.server.llm.repair.parse_object` (`parse_extraction`); an answer
that holds no object of the expected shape is an `LLMError` (the caller fails visibly,
never drops a fact silently).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from memplane.domain.context import ContextMessage, TextBlock, ToolUseBlock
from memplane.domain.models import ConversationMessage, MemoryType
from memplane.server.llm.chat import LLMError
from memplane.server.llm.repair import parse_object
from memplane.text.language import Language, detect_language

EXTRACTED_TYPES = ("user", "feedback", "project", "reference", "procedural", "tool")
MAX_FACTS = 30
"""Memories kept from one extraction answer (the prompt asks for at most 20)."""
MESSAGE_PROMPT_CHARS = 4_000
"""A message is shown to the model up to this many characters."""
TOOL_INPUT_PROMPT_CHARS = 1_000
"""A tool call's input JSON is shown up to this many characters (`from_context`)."""
_LANGUAGE_NAMES: dict[Language, str] = {"en": "English", "zh": "Simplified Chinese (简体中文)"}

FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": list(EXTRACTED_TYPES)},
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "content": {"type": "string"},
                    "speaker": {"type": "string", "enum": ["user", "assistant"]},
                    "valid_from": {"type": ["string", "null"]},
                    "message_ids": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["type", "name", "description", "content", "speaker"],
            },
        },
        "forget": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"content": {"type": "string"}, "message_ids": {"type": "array"}},
                "required": ["content"],
            },
        },
    },
    "required": ["memories"],
}


@dataclass(frozen=True)
class Fact:
    """One extracted memory (ordinal `index`, from 1). `speaker` "user" or "assistant";
    `valid_from` the date it became true (None: the session's time)."""

    index: int
    type: MemoryType
    name: str
    description: str
    content: str
    speaker: str
    valid_from: datetime | None
    message_ids: tuple[str, ...]


@dataclass(frozen=True)
class ForgetRequest:
    """The user asked to forget *content* (ordinal `index`, from 1)."""

    index: int
    content: str


@dataclass(frozen=True)
class Extraction:
    """A parsed extraction answer and the repairs its JSON needed."""

    facts: list[Fact]
    forget: list[ForgetRequest]
    repairs: tuple[str, ...]


def prompt_sha256(messages: Sequence[dict[str, str]]) -> str:
    """Hex SHA-256 of a prompt (its messages as canonical JSON), for the audit."""
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def language_of(messages: Sequence[ConversationMessage]) -> Language:
    """ "zh" or "en" by `memplane.text.language.detect_language` over the messages' text."""
    return detect_language(m.content for m in messages)


def session_time(messages: Sequence[ConversationMessage], now: datetime) -> datetime:
    """The time of the span's last message (the session's "now"), else *now*."""
    times = [m.created_at for m in messages if m.created_at is not None]
    return max(times) if times else now


def from_context(messages: Sequence[ContextMessage]) -> list[ConversationMessage]:
    """An agent's context messages as a span for `extraction_prompt`: the same id, role,
    name and time; the blocks as text, a tool call as `[tool_use name(input)]` (input cut
    to TOOL_INPUT_PROMPT_CHARS), an output as `[tool_result name] output`."""
    out = []
    for message in messages:
        parts: list[str] = []
        for block in message.blocks:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                parts.append(f"[tool_use {block.name}({_cut(block.input_json, TOOL_INPUT_PROMPT_CHARS)})]")
            else:
                parts.append(f"[tool_result {block.name}] {block.output}" if block.name else block.output)
        content = "\n".join(parts)
        out.append(ConversationMessage(content, message.role, message.id, message.name, message.created_at))
    return out


def extraction_prompt(
    messages: Sequence[ConversationMessage], *, now: datetime, language: Language | None = None
) -> list[dict[str, str]]:
    """The chat messages of call 1 for a span (oldest first); *now* is the time of
    writing; *language* the one the memories are asked in (None: `language_of` the span)."""
    language_name = _LANGUAGE_NAMES[language or language_of(messages)]
    when = _when(session_time(messages, now))
    system = "\n".join(
        [
            "You turn a span of a conversation between a user and an AI assistant into durable memories"
            " for later conversations.",
            "",
            'Answer with ONE JSON object and nothing else: {"memories": [{"type", "name", "description",'
            ' "content", "speaker", "valid_from", "message_ids"}, ...], "forget": [{"content",'
            ' "message_ids"}, ...]}.',
            '"type" is one of:',
            '- "user": a lasting fact about the user or a preference of theirs (who they are, where they'
            " live, what they like, how they want things done).",
            "- \"feedback\": the user's judgement of the assistant's work (what to keep doing, what to stop).",
            '- "project": a fact about the work in progress: goals, owners, deadlines, decisions.',
            '- "reference": where something is found: a URL, a document, a dashboard, a person to ask.',
            '- "procedural": task experience worth reusing: what worked, what failed and why, under which'
            " conditions, the steps that solved it.",
            '- "tool": a lesson about using a tool: arguments that worked, errors seen and their fixes.',
            '"name": a short title (at most 8 words). "description": one sentence saying when the memory'
            ' is useful. "content": the memory itself, self-contained: names instead of pronouns,'
            " identifiers verbatim.",
            '"speaker": "user" when the user said or confirmed it, "assistant" when only the assistant'
            " said it. An assistant's suggestion is NOT a fact about the user: keep it only as what it is"
            ' (e.g. "The assistant suggested ..."), with speaker "assistant".',
            f"Dates: the session took place on {when}; every message shows its time. Write absolute dates"
            " (YYYY-MM-DD) instead of relative ones (yesterday, last week, next Friday), computed from the"
            ' time of the message that says them. "valid_from": the date (YYYY-MM-DD) the fact became true'
            " when the conversation says it, else null.",
            '"message_ids": the ids (in brackets before each message) the memory comes from.',
            '"forget": only when the user explicitly asks to forget or delete something they told before'
            ' ("forget my address"): what to forget, in their words. Never infer it.',
            "Keep only durable information stated in the messages: no small talk, nothing true only for"
            ' the moment, nothing invented. At most 20 memories; {"memories": [], "forget": []} when'
            " nothing is worth keeping.",
            f'Write "name", "description" and "content" in the language of the conversation: {language_name}.'
            ' Keep the JSON keys and the "type" and "speaker" values in English.',
        ]
    )
    user = "\n".join(
        [
            "Messages, oldest first, each as [id] [time] role (name): text",
            "<messages>",
            *(_entry(m) for m in messages),
            "</messages>",
            "",
            "Return the JSON object now.",
        ]
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_extraction(text: str, *, limits: tuple[int, int, int]) -> Extraction:
    """Facts and forget requests in call 1's answer; items of an unknown type or without
    content are dropped (counted nowhere: the model's own noise), exact repeats too.
    *limits*: max bytes of (name, description, content), longer text is cut. Raises
    `LLMError` when the answer holds no {"memories": [...]} object."""
    parsed = parse_object(text, lambda o: isinstance(o.get("memories"), list))
    if parsed is None:
        raise LLMError('answer has no {"memories": [...]} object')
    facts: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    for item in parsed.value["memories"]:
        fact = _fact(item, len(facts) + 1, limits)
        if fact is None or (fact.type.value, fact.content) in seen:
            continue
        seen.add((fact.type.value, fact.content))
        facts.append(fact)
        if len(facts) >= MAX_FACTS:
            break
    forget: list[ForgetRequest] = []
    raw_forget = parsed.value.get("forget")
    for item in raw_forget if isinstance(raw_forget, list) else []:
        content = " ".join(str(item.get("content") or "").split()) if isinstance(item, dict) else ""
        if content:
            forget.append(ForgetRequest(len(forget) + 1, content))
    return Extraction(facts, forget, parsed.repairs)


def _fact(item: Any, index: int, limits: tuple[int, int, int]) -> Fact | None:
    if not isinstance(item, dict):
        return None
    kind = str(item.get("type") or "").strip().lower()
    content = " ".join(str(item.get("content") or "").split())
    if kind not in EXTRACTED_TYPES or not content:
        return None
    name = " ".join(str(item.get("name") or "").split()) or " ".join(content.split()[:8])
    speaker = "assistant" if str(item.get("speaker") or "").strip().lower() == "assistant" else "user"
    ids = item.get("message_ids")
    return Fact(
        index=index,
        type=MemoryType(kind),
        name=_clip(name, limits[0]),
        description=_clip(" ".join(str(item.get("description") or "").split()), limits[1]),
        content=_clip(content, limits[2]),
        speaker=speaker,
        valid_from=_date(item.get("valid_from")),
        message_ids=tuple(str(i) for i in ids if isinstance(i, str | int)) if isinstance(ids, list) else (),
    )


def _date(value: Any) -> datetime | None:
    try:
        day = date.fromisoformat(str(value or "")[:10])
    except ValueError:
        return None
    return datetime.combine(day, time(), tzinfo=UTC)


def _clip(text: str, max_bytes: int) -> str:
    data = text.encode()
    return text if len(data) <= max_bytes else data[:max_bytes].decode(errors="ignore")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters not shown]"


def _entry(message: ConversationMessage) -> str:
    text = _cut(message.content, MESSAGE_PROMPT_CHARS)
    head = f"[{message.id or 'no id'}] [{_when(message.created_at)}] {message.role.value}"
    if message.name:
        head += f" ({message.name})"
    return f"{head}: {text}"


def _when(at: datetime | None) -> str:
    """ "2023-05-08 Mon 13:56 UTC" (the weekday helps with "next Friday")."""
    if at is None:
        return "time unknown"
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %a %H:%M UTC")
