"""Which language a conversation is in, for summary headings and LLM prompts (compaction and write-back).

The rule: count letters (`str.isalpha`: Latin, Cyrillic, kana, ideographs, ...) and,
among them, CJK ideographs (Unified Ideographs, extensions A-F, compatibility
ideographs). The conversation is Chinese ("zh") when ideographs are at least
`ZH_SHARE` (20%) of the letters, else English ("en"); no letters at all is "en".

Letters rather than words are counted on purpose: one ideograph carries about as much as
one short Latin word, so Chinese text that quotes identifiers, paths or English product
names ("用 React 重写 src/app.tsx 的路由") is still far above 20%, while English text
that mentions a Chinese name or two ("I met 张伟 in Shenzhen") stays far below it.
Digits, punctuation, whitespace and emoji are not letters and do not count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

Language = Literal["zh", "en"]
LANGUAGES: tuple[Language, ...] = ("zh", "en")

ZH_SHARE = 0.2
"""Share of CJK ideographs among letters at or above which the text is Chinese."""

IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
"""One CJK ideograph: Unified Ideographs + extension A, compatibility ideographs,
extensions B-F (the Supplementary Ideographic Plane)."""


def ideograph_count(text: str) -> int:
    """Number of CJK ideographs in *text*."""
    return len(IDEOGRAPH.findall(text))


def as_language(value: str) -> Language:
    """*value* ("zh" or "en") typed as `Language`; raises `ValueError` for anything else."""
    if value == "zh":
        return "zh"
    if value == "en":
        return "en"
    raise ValueError(f"unknown language {value!r}; expected zh or en")


def detect_language(texts: Iterable[str]) -> Language:
    """ "zh" when CJK ideographs make up at least 20% of the letters of all *texts*
    together, else "en" (also for no letters at all). Never raises; O(total characters)."""
    ideographs = 0
    letters = 0
    for text in texts:
        ideographs += ideograph_count(text)
        letters += sum(map(str.isalpha, text))
    if letters == 0:
        return "en"
    return "zh" if ideographs / letters >= ZH_SHARE else "en"
