"""The LLM summariser's prompts and answer parsing, over the provider's `ChatModel`
(`memplane.llm.chat`: the endpoint, retries, timeouts, errors as `LLMError`, which
compaction calls `SummarizerError`).

- `LLMSummarizer.summarize` writes ReMe's structured summary (compact_memory: Goal,
  Constraints & Preferences, Progress, Key Decisions, Next Steps, Critical Context),
  updating the previous summary when one is given (ReMe's incremental compaction), and
  returns it rendered as Markdown (`summary.render`).
- `LLMSummarizer.extract_memories` turns a span into durable memories of three kinds,
  ReMe's personal / task / tool memory (summary_memory): `user`, `procedural`, `tool`.

The prompt shows each message with its time (UTC), role and name, so the model can turn
"yesterday" into a date. Message text is never logged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from memplane.compaction.summary import SummaryFormatError, parse_answer, render
from memplane.domain.context import ContextMessage, TextBlock, ToolUseBlock
from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError
from memplane.llm.chat import ChatModel, LLMError
from memplane.llm.repair import parse_object
from memplane.text.language import Language

MemoryKind = Literal["user", "procedural", "tool"]

TOOL_OUTPUT_PROMPT_CHARS = 4_000
"""A tool output is shown to the model up to this many characters (its head), so one
huge output cannot crowd the conversation out of the prompt."""
TOOL_INPUT_PROMPT_CHARS = 1_000
"""A tool call's input JSON is shown up to this many characters."""
MAX_EXTRACTED_MEMORIES = 50
"""Memories kept from one extraction answer (the prompt asks for at most 20)."""

_LANGUAGE_NAMES: dict[Language, str] = {"en": "English", "zh": "Simplified Chinese (简体中文)"}
_KIND_ALIASES: dict[str, MemoryKind] = {
    "user": "user",
    "personal": "user",
    "preference": "user",
    "profile": "user",
    "procedural": "procedural",
    "task": "procedural",
    "procedure": "procedural",
    "experience": "procedural",
    "tool": "tool",
}


SummarizerError = LLMError
"""Compaction's name for the provider's `LLMError` (one class: callers catch either)."""


@dataclass(frozen=True)
class ExtractedMemory:
    """A durable memory found in a span: `type` user (a fact about or preference of the
    user), procedural (reusable task experience) or tool (a tool-usage lesson); `name`
    a short title, `description` when it is useful, `content` the memory itself."""

    type: MemoryKind
    name: str
    description: str
    content: str


class LLMSummarizer:
    """ReMe's compact_memory and summary_memory over a `ChatModel`."""

    def __init__(self, model: ChatModel) -> None:
        """The model is shared, not owned: close it yourself."""
        self._model = model

    async def summarize(
        self,
        messages: Sequence[ContextMessage],
        *,
        previous_summary: str,
        language: Language,
        max_summary_tokens: int,
        workspace: Workspace | None = None,
    ) -> str:
        """The structured summary of *messages* (oldest first) as Markdown: six `##`
        sections in *language* ("zh" or "en"), asked of the model as one JSON object.
        With *previous_summary* the model updates it (keeps still-valid items, drops
        superseded ones) rather than summarising the messages alone, so the running
        summary covers everything compacted so far. The prompt asks for at most
        *max_summary_tokens* tokens; the model may overshoot, so count the result.
        *workspace* picks its model and LLM rate-limit bucket (`ChatModel.chat`).

        Raises `SummarizerError` when the call fails (see `ChatModel.chat`; a call the
        workspace's LLM rate limit refuses is "rate limited: ...") or the answer is not
        the structured summary ("answer has no sections ...").
        """
        prompt = [
            {
                "role": "system",
                "content": _summary_system_prompt(language, max_summary_tokens, bool(previous_summary.strip())),
            },
            {"role": "user", "content": _summary_user_prompt(messages, previous_summary)},
        ]
        answer = await self._ask(prompt, workspace)
        try:
            structured = parse_answer(answer)
        except SummaryFormatError as exc:
            raise SummarizerError(exc.reason) from None
        return render(structured, language)

    async def extract_memories(
        self,
        messages: Sequence[ContextMessage],
        *,
        summary: str,
        language: Language,
        workspace: Workspace | None = None,
    ) -> list[ExtractedMemory]:
        """Durable memories in *messages* (with *summary* of the span as context), in
        *language*: `user` facts and preferences (ReMe's personal memory), `procedural`
        task experience (task memory), `tool` usage lessons (tool memory). Items of
        unknown type or without content are dropped, duplicates too; at most 50 kept.
        An empty list means nothing worth keeping.

        Raises `SummarizerError` when the call fails or the answer holds no
        `{"memories": [...]}` object (prose around it is tolerated).
        """
        prompt = [
            {"role": "system", "content": _extraction_system_prompt(language)},
            {"role": "user", "content": _extraction_user_prompt(messages, summary)},
        ]
        answer = await self._ask(prompt, workspace)
        return parse_memories(answer)

    async def _ask(self, prompt: list[dict[str, str]], workspace: Workspace | None) -> str:
        try:
            return (await self._model.chat(prompt, json_mode=True, workspace=workspace)).text
        except QuotaExceededError as error:
            raise SummarizerError(f"rate limited: {error.description}") from None


def parse_memories(text: str) -> list[ExtractedMemory]:
    """The memories in an extraction answer: `{"memories": [{type, name, description,
    content}, ...]}` (in prose or a fence too), or a bare JSON list of such items.
    Raises `SummarizerError` when there is neither."""
    parsed = parse_object(text, lambda o: isinstance(o.get("memories"), list))
    items: Any
    if parsed is not None:
        items = parsed.value["memories"]
    else:
        items = _json_list(text)
        if items is None:
            raise SummarizerError('answer has no {"memories": [...]} object')
    out: list[ExtractedMemory] = []
    seen: set[tuple[str, str]] = set()
    for item in items:
        memory = _memory(item)
        if memory is None or (memory.type, memory.content) in seen:
            continue
        seen.add((memory.type, memory.content))
        out.append(memory)
        if len(out) >= MAX_EXTRACTED_MEMORIES:
            break
    return out


# -- prompts -------------------------------------------------------------------------
def _summary_system_prompt(language: Language, max_summary_tokens: int, updating: bool) -> str:
    lines = [
        "You compact an AI agent's conversation history into a structured summary that will replace"
        " those messages in the agent's context window. Everything the agent needs to continue must"
        " survive; small talk and repetition must not.",
        "",
        "Answer with ONE JSON object and nothing else. It has exactly these keys, each a list of short"
        " bullet strings (an empty list when there is nothing to say):",
        '- "goal": what the user wants to achieve overall.',
        '- "constraints": requirements, constraints and preferences the user stated (formats, tools,'
        " style, things to avoid).",
        '- "progress": what has been done so far and its outcome (done, in progress, blocked).',
        '- "decisions": decisions taken and the reason for each.',
        '- "next_steps": what remains to be done, in order.',
        '- "critical_context": facts needed to continue, copied verbatim: file paths, identifiers,'
        " URLs, commands, error messages, numbers, names, dates.",
        "",
        "Rules:",
        "- Keep file paths, identifiers, commands and error messages exactly as written, in critical_context.",
        "- Every message is shown with its time. Turn relative dates (yesterday, last week, next Friday,"
        " in two days) into absolute dates (YYYY-MM-DD) computed from the time of the message that says them.",
        "- Only state what the messages or the previous summary say; never invent.",
        f"- Write the bullet text in {_LANGUAGE_NAMES[language]}; keep the JSON keys in English.",
        f"- Keep the whole summary under {max_summary_tokens} tokens: merge related points, drop details"
        " that no longer matter.",
    ]
    if updating:
        lines.append(
            "- A previous summary of earlier messages is given. UPDATE it with the new messages: keep its"
            " items that are still valid, drop or rewrite those the new messages supersede (a finished next"
            " step becomes progress; a changed decision replaces the old one), and return the complete"
            " updated summary, not only the changes."
        )
    return "\n".join(lines)


def _summary_user_prompt(messages: Sequence[ContextMessage], previous_summary: str) -> str:
    parts: list[str] = []
    if previous_summary.strip():
        parts += ["Previous summary (of earlier messages):", "<previous_summary>", previous_summary.strip()]
        parts += ["</previous_summary>", ""]
    parts += [
        "Messages to summarise, oldest first, each as [time] role (name):",
        "<messages>",
        transcript(messages),
        "</messages>",
        "",
        "Return the JSON object now.",
    ]
    return "\n".join(parts)


def _extraction_system_prompt(language: Language) -> str:
    return "\n".join(
        [
            "You turn a span of an AI agent's conversation into durable memories for later conversations.",
            "",
            'Answer with ONE JSON object and nothing else: {"memories": [{"type": ..., "name": ...,'
            ' "description": ..., "content": ...}, ...]}. "type" is one of:',
            '- "user": a lasting fact about the user or a preference of theirs (who they are, what they'
            " like, how they want things done).",
            '- "procedural": experience from the task worth reusing: what worked, what failed and why,'
            " the steps that solved it.",
            '- "tool": a lesson about using a tool: arguments that work, errors and their fixes, cost or latency.',
            '"name" is a short title (at most 8 words); "description" one sentence saying when the memory'
            ' is useful; "content" the memory itself, self-contained: names instead of pronouns, absolute'
            " dates (YYYY-MM-DD, from the messages' times) instead of relative ones, identifiers verbatim.",
            "",
            "Keep only durable information stated in the messages: no small talk, nothing true only for"
            ' the moment, nothing invented. At most 20 memories; {"memories": []} when nothing is worth'
            " keeping.",
            f'Write "name", "description" and "content" in {_LANGUAGE_NAMES[language]}; keep the JSON keys'
            ' and the "type" values in English.',
        ]
    )


def _extraction_user_prompt(messages: Sequence[ContextMessage], summary: str) -> str:
    parts: list[str] = []
    if summary.strip():
        parts += ["Summary of the span:", "<summary>", summary.strip(), "</summary>", ""]
    parts += [
        "Messages, oldest first, each as [time] role (name):",
        "<messages>",
        transcript(messages),
        "</messages>",
        "",
        "Return the JSON object now.",
    ]
    return "\n".join(parts)


def transcript(messages: Sequence[ContextMessage]) -> str:
    """The messages as the model sees them: one `[time] role (name): text`
    entry per message (time as "2023-05-08 Mon 13:56 UTC", "time unknown" without a time); tool calls as
    `[tool_use name(input)]` and outputs as `[tool_result name] output`, cut to their
    first 1,000 / 4,000 characters."""
    return "\n".join(_entry(m) for m in messages)


def _entry(message: ContextMessage) -> str:
    head = f"[{_when(message.created_at)}] {message.role.value}"
    if message.name:
        head += f" ({message.name})"
    parts: list[str] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            parts.append(f"[tool_use {block.name}({_cut(block.input_json, TOOL_INPUT_PROMPT_CHARS)})]")
        else:
            label = f"[tool_result {block.name}]" if block.name else "[tool_result]"
            parts.append(f"{label} {_cut(block.output, TOOL_OUTPUT_PROMPT_CHARS)}")
    return f"{head}: " + "\n".join(parts)


def _when(at: datetime | None) -> str:
    """ "2023-05-08 Mon 13:56 UTC" (the weekday helps with "next Friday")."""
    if at is None:
        return "time unknown"
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %a %H:%M UTC")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters not shown]"


# -- answer parsing ------------------------------------------------------------------
def _json_list(text: str) -> list[Any] | None:
    decoder = json.JSONDecoder()
    start = text.find("[")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, list):
                return value
        start = text.find("[", start + 1)
    return None


def _memory(item: Any) -> ExtractedMemory | None:
    if not isinstance(item, dict):
        return None
    kind = _KIND_ALIASES.get(str(item.get("type") or "").strip().lower())
    content = " ".join(str(item.get("content") or "").split())
    if kind is None or not content:
        return None
    name = " ".join(str(item.get("name") or "").split()) or " ".join(content.split()[:8])
    description = " ".join(str(item.get("description") or "").split())
    return ExtractedMemory(type=kind, name=name, description=description, content=content)
