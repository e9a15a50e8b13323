"""Segment CJK text into words before PostgreSQL full-text indexing.

PostgreSQL's default parser splits on spaces and punctuation, so an unsegmented Chinese
run ("我在腾讯做前端开发") becomes one lexeme and a keyword inside it never matches
(shared case C001). We insert spaces between the words found by jieba's search mode
(`rjieba.cut_for_search`, the Rust port of jieba), which also emits the sub-words of
long compounds (前端开发 → 前端, 开发, 前端开发), so a query word matches a longer word
in a memory. Text without CJK characters is returned unchanged (fast path).
"""

from __future__ import annotations

import re

import rjieba

# CJK Unified Ideographs (+ extension A), Hiragana/Katakana, Hangul syllables.
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7af]")


def has_cjk(text: str) -> bool:
    """True if *text* holds at least one CJK character."""
    return _CJK.search(text) is not None


def segment(text: str) -> str:
    """Return *text* with its words separated by single spaces where CJK is present.

    Non-CJK text comes back unchanged. The result is meant for `to_tsvector`, never for
    display.
    """
    if not has_cjk(text):
        return text
    return " ".join(token for token in rjieba.cut_for_search(text) if not token.isspace())
