"""An agent's context: messages made of content blocks (the words of the compaction service).

The model is the union of OpenAI chat messages and AgentScope 2.x `Msg`: roles system /
user / assistant / tool, blocks text, tool_use (id, name, input as JSON text) and
tool_result (tool_use id, name, output text). Conversions to and from both dict shapes
live in `memplane.client.formats`; the gRPC edge converts to and from protobuf.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime

from memplane.domain.models import MessageRole

# Token encodings the compaction service counts exactly (quicktok's bundled vocabularies).
TOKEN_ENCODINGS = ("cl100k_base", "o200k_base", "o200k_harmony", "llama3", "qwen3")
DEFAULT_TOKEN_ENCODING = "o200k_base"  # noqa: S105 - an encoding name, not a secret


@dataclass(frozen=True)
class TextBlock:
    """Text content."""

    text: str


@dataclass(frozen=True)
class ToolUseBlock:
    """A tool call: id (OpenAI tool_call id), tool name and input as JSON text."""

    id: str
    name: str
    input_json: str = "{}"


@dataclass(frozen=True)
class Truncation:
    """Where a cut tool output is stored and where to resume reading it.

    Sizes in UTF-8 bytes; `resume_line` 1-based; `resume_column` 0-based in code points
    (non-zero only when a line longer than the limit was cut inside)."""

    ref: str
    total_bytes: int
    total_lines: int
    kept_bytes: int
    resume_line: int
    resume_column: int
    expires_at: datetime


@dataclass(frozen=True)
class ToolResultBlock:
    """The output of the tool call `tool_use_id`; `truncation` is set once it was cut."""

    tool_use_id: str
    output: str
    name: str = ""
    truncation: Truncation | None = None


Block = TextBlock | ToolUseBlock | ToolResultBlock


@dataclass(frozen=True)
class ContextMessage:
    """One message of an agent's context. `id` is the client's (may be empty)."""

    role: MessageRole
    blocks: tuple[Block, ...]
    name: str = ""
    id: str = ""
    created_at: datetime | None = None

    def text(self) -> str:
        """Plain-text rendering (for summaries, transcripts and lexical use): text blocks
        as they are, a tool call as `[tool_use name(input)]`, an output as
        `[tool_result name] output`, blocks separated by newlines."""
        parts: list[str] = []
        for block in self.blocks:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                parts.append(f"[tool_use {block.name}({block.input_json})]")
            else:
                parts.append(f"[tool_result {block.name}] {block.output}" if block.name else block.output)
        return "\n".join(parts)

    def tool_use_ids(self) -> list[str]:
        """Ids of the tool calls this message makes."""
        return [b.id for b in self.blocks if isinstance(b, ToolUseBlock)]

    def opens_user_turn(self) -> bool:
        """A user message that says something: not one that only carries tool results
        (AgentScope and Anthropic-style clients put tool outputs in user messages)."""
        return self.role == MessageRole.USER and (
            not self.blocks or any(not isinstance(b, ToolResultBlock) for b in self.blocks)
        )

    def with_blocks(self, blocks: tuple[Block, ...]) -> ContextMessage:
        """A copy with other blocks."""
        return replace(self, blocks=blocks)


@dataclass(frozen=True)
class ContextSplit:
    """Token counts of a context and where to split it (see `compaction.split`).

    `messages[:keep_from]` are to be compacted, `messages[keep_from:]` kept."""

    total_tokens: int
    system_prompt_tokens: int
    previous_summary_tokens: int
    message_tokens: tuple[int, ...]
    threshold_tokens: int
    needs_compaction: bool
    keep_from: int
    kept_tokens: int
    over_reserve: bool
    valid: bool
    problems: tuple[str, ...] = field(default=())


class SummarizerChoice(enum.StrEnum):
    """Which summariser a compaction asks for."""

    AUTO = "auto"  # the LLM when one is configured, else extractive
    LLM = "llm"
    EXTRACTIVE = "extractive"


class SummaryMethod(enum.StrEnum):
    """How the summary in a compaction reply was made."""

    LLM = "llm"
    EXTRACTIVE = "extractive"
    PREVIOUS_KEPT = "previous_kept"  # the summariser failed; nothing was compacted


@dataclass(frozen=True)
class CompactionOutcome:
    """The reply of a compaction. When `compacted` is False the summary is the previous
    one, unchanged, `failure` says why, and the caller must keep its messages."""

    summary: str
    method: SummaryMethod
    compacted: bool
    failure: str
    compacted_message_count: int
    input_tokens: int
    summary_tokens: int
    language: str
    transcript_message_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolResultLimits:
    """Byte limits of tool-output compaction (ReMe's defaults: 100 KB recent, 3 KB old,
    last 3 messages untouched by the old limit, whole outputs kept 3 days)."""

    recent_max_bytes: int
    old_max_bytes: int
    keep_last_messages: int
    retention_seconds: float
