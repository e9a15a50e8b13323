"""Exact, offline token counts for OpenAI and open-model encodings.

The BPE itself is `quicktok` (PyPI `quicktok-v1`), which ships its vocabularies inside
the wheel (no download at first use, unlike stock tiktoken) and gives the same ids as
tiktoken's `encode_ordinary` for cl100k_base / o200k_base. Messages are counted as
OpenAI's cookbook counts chat input ("How to count tokens with tiktoken"): the content's
tokens plus 3 per message and 1 more when a name is set. A tool call counts its name and
its input JSON; a tool output counts its text.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import quicktok

from memplane.domain.context import (
    DEFAULT_TOKEN_ENCODING,
    TOKEN_ENCODINGS,
    ContextMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

ENCODINGS = TOKEN_ENCODINGS
DEFAULT_ENCODING = DEFAULT_TOKEN_ENCODING
TOKENS_PER_MESSAGE = 3  # OpenAI cookbook: <|start|>{role/name}\n{content}<|end|>\n
TOKENS_PER_NAME = 1


class TokenCounter:
    """Counts tokens of text and messages in one encoding. Thread-safe (quicktok releases
    the GIL and keeps no per-call state)."""

    def __init__(self, encoding: str) -> None:
        """Raises `ValueError` for an encoding not in `ENCODINGS`."""
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; choose one of {', '.join(ENCODINGS)}")
        self.encoding = encoding
        self._tokenizer = quicktok.get_encoding(encoding)

    def count_text(self, text: str) -> int:
        """Tokens of *text* (special-token text is counted as ordinary text)."""
        return len(self._tokenizer.encode_ordinary(text)) if text else 0

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, counted in one native batch call."""
        if not texts:
            return []
        return [int(n) for n in quicktok.count_batch(self._tokenizer, list(texts))]

    def count_message(self, message: ContextMessage) -> int:
        """Tokens of one chat message, framing included."""
        return self.count_messages([message])[0]

    def count_messages(self, messages: Sequence[ContextMessage]) -> list[int]:
        """Tokens of each message, framing included (one batch call for all pieces)."""
        pieces: list[str] = []
        owners: list[int] = []
        for i, message in enumerate(messages):
            for text in _pieces(message):
                pieces.append(text)
                owners.append(i)
        counts = [TOKENS_PER_MESSAGE + (TOKENS_PER_NAME if m.name else 0) for m in messages]
        for owner, n in zip(owners, self.count_texts(pieces), strict=True):
            counts[owner] += n
        return counts


def _pieces(message: ContextMessage) -> list[str]:
    out: list[str] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            out.append(block.text)
        elif isinstance(block, ToolUseBlock):
            out.extend((block.name, block.input_json))
        elif isinstance(block, ToolResultBlock):
            out.append(block.output)
    if message.name:
        out.append(message.name)
    return out


@functools.cache
def token_counter(encoding: str) -> TokenCounter:
    """The shared counter of *encoding* (vocabularies load once per process).
    Raises `ValueError` for an unknown encoding."""
    return TokenCounter(encoding)
