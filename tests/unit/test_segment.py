"""CJK segmentation before full-text indexing (memplane.text.segment)."""

from __future__ import annotations

import pytest

from memplane.text.segment import has_cjk, segment


def test_chinese_sentence_gets_spaces_between_words() -> None:
    out = segment("我在腾讯做前端开发，主要用 React")
    tokens = out.split(" ")
    assert "腾讯" in tokens
    assert "前端" in tokens
    assert "React" in tokens  # Latin words inside CJK text survive


def test_search_mode_emits_sub_words_of_compounds() -> None:
    tokens = segment("前端开发").split(" ")
    assert {"前端", "开发", "前端开发"} <= set(tokens)


def test_keyword_inside_a_longer_sentence_is_its_own_token() -> None:
    tokens = segment("我们的检索系统先召回候选，再用模型精排提升排序质量").split(" ")
    assert "精排" in tokens
    assert segment("精排").split(" ") == ["精排"]


@pytest.mark.parametrize(
    "text",
    [
        "The deploy key for project Falcon is stored under secret/falcon/deploy",
        "  spaces   kept\tas given\n",
        "café naïve Ünïcode — ok",
        "",
    ],
)
def test_non_cjk_text_is_returned_unchanged(text: str) -> None:
    assert segment(text) == text
    assert not has_cjk(text)


@pytest.mark.parametrize("text", ["東京タワー", "한국어 문장", "中文"])
def test_cjk_detection(text: str) -> None:
    assert has_cjk(text)
    assert segment(text).replace(" ", "") != ""
