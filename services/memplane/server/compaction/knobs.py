"""The knobs every compaction call shares, resolved the same way for each: the token
encoding (the request's, else the workspace's), the summary language (the request's,
else detected), the empty scope, and counting a context off the event loop when it is
large."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from memplane.domain.context import TOKEN_ENCODINGS, ContextMessage
from memplane.domain.models import Scope, Workspace
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.text.language import Language, as_language, detect_language
from memplane.text.tokens import TokenCounter, token_counter

NO_SCOPE = Scope()

# Contexts with more messages than this are counted off the event loop (quicktok
# releases the GIL while it encodes, so the loop keeps serving other calls).
OFFLOAD_MESSAGES = 512


async def count_messages(counter: TokenCounter, messages: Sequence[ContextMessage]) -> list[int]:
    """Tokens of each message; in a worker thread for large contexts."""
    if len(messages) <= OFFLOAD_MESSAGES:
        return counter.count_messages(messages)
    return await asyncio.to_thread(counter.count_messages, messages)


def counter_for(workspace: Workspace, encoding: str, field: str = "encoding") -> TokenCounter:
    """The counter of *encoding*, or of the workspace's default when it is empty. Raises
    `InvalidArgumentError` on *field* for an unknown encoding."""
    name = encoding or workspace.token_encoding
    if name not in TOKEN_ENCODINGS:
        raise InvalidArgumentError(FieldViolation(field, f"must be one of {', '.join(TOKEN_ENCODINGS)}"))
    return token_counter(name)


def language_for(language: str, messages: Sequence[ContextMessage], field: str = "language") -> Language:
    """*language* as a `Language`, or the one detected in *messages* when it is empty.
    Raises `InvalidArgumentError` on *field* for anything but "zh", "en" or ""."""
    if not language:
        return detect_language(m.text() for m in messages)
    try:
        return as_language(language)
    except ValueError:
        raise InvalidArgumentError(FieldViolation(field, "must be 'zh', 'en' or empty (detect)")) from None
