"""The LLM summariser's prompts and answer parsing, over the provider's `ChatModel`
(`memplane.server.llm.chat`: the endpoint, retries, timeouts, errors as `LLMError`, which
compaction calls `SummarizerError`).

- `LLMSummarizer.summarize` writes ReMe's structured summary (compact_memory: Goal,
  Constraints & Preferences, Progress, Key Decisions, Next Steps, Critical Context),
  updating the previous summary when one is given (ReMe's incremental compaction), and
  returns it rendered as Markdown (`summary.render`).
- `LLMSummarizer.extract` turns a span into durable memories (ReMe's summary_memory)
  with the extraction prompt and parser write-back's extraction jobs use
  (`memplane.server.llm.extraction`): six types, speaker, dates, message-id provenance.

The prompt shows each message with its time (UTC), role and name, so the model can turn
"yesterday" into a date. Message text is never logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from memplane.domain.context import ContextMessage, TextBlock, ToolUseBlock
from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError
from memplane.server.compaction.summary import SummaryFormatError, parse_answer, render
from memplane.server.llm.chat import ChatModel, LLMError
from memplane.server.llm.extraction import (
    FACTS_SCHEMA,
    Extraction,
    extraction_prompt,
    from_context,
    parse_extraction,
    prompt_sha256,
)
from memplane.text.language import Language

TOOL_OUTPUT_PROMPT_CHARS = 4_000
"""A tool output is shown to the model up to this many characters (its head), so one
huge output cannot crowd the conversation out of the prompt."""
TOOL_INPUT_PROMPT_CHARS = 1_000
"""A tool call's input JSON is shown up to this many characters."""
_LANGUAGE_NAMES: dict[Language, str] = {"en": "English", "zh": "Simplified Chinese (简体中文)"}


SummarizerError = LLMError
"""Compaction's name for the provider's `LLMError` (one class: callers catch either)."""


@dataclass(frozen=True)
class Extracted:
    """An extraction answer read (`memplane.server.llm.extraction.Extraction`), the model that
    gave it and the SHA-256 of the prompt (for the audit)."""

    extraction: Extraction
    model: str
    prompt_sha256: str


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

    async def extract(
        self,
        messages: Sequence[ContextMessage],
        *,
        language: Language,
        limits: tuple[int, int, int],
        workspace: Workspace | None = None,
        now: datetime | None = None,
    ) -> Extracted:
        """Durable memories in *messages*, asked with write-back's extraction prompt and
        read with its parser (`memplane.server.llm.extraction`: types user, feedback, project,
        reference, procedural, tool; speaker; valid_from; message ids) in *language*.
        *limits*: max bytes of (name, description, content); *now* the time of writing
        (default: the clock). Raises `SummarizerError` when the call fails or the answer
        holds no `{"memories": [...]}` object (prose around it is tolerated)."""
        prompt = extraction_prompt(from_context(messages), now=now or datetime.now(UTC), language=language)
        try:
            answer = await self._model.chat(
                prompt, json_mode=True, schema=FACTS_SCHEMA, schema_name="memories", workspace=workspace
            )
        except QuotaExceededError as error:
            raise SummarizerError(f"rate limited: {error.description}") from None
        return Extracted(parse_extraction(answer.text, limits=limits), answer.model, prompt_sha256(prompt))

    async def _ask(self, prompt: list[dict[str, str]], workspace: Workspace | None) -> str:
        try:
            return (await self._model.chat(prompt, json_mode=True, workspace=workspace)).text
        except QuotaExceededError as error:
            raise SummarizerError(f"rate limited: {error.description}") from None


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
