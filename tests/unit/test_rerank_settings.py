"""The rerank stage's settings from the environment (MEMPLANE_RERANK__*), and bad values
rejected naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memplane.server.settings import Settings


def test_unset_means_no_rerank_stage() -> None:
    assert Settings().rerank.url is None


def test_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMPLANE_RERANK__URL", "http://tei:8080/rerank")
    monkeypatch.setenv("MEMPLANE_RERANK__PROTOCOL", "tei")
    monkeypatch.setenv("MEMPLANE_RERANK__API_KEY", "rk-secret")
    monkeypatch.setenv("MEMPLANE_RERANK__TOP_N", "16")
    monkeypatch.setenv("MEMPLANE_RERANK__TIMEOUT", "0.5")
    rerank = Settings().rerank
    assert (rerank.url, rerank.protocol, rerank.top_n, rerank.timeout) == ("http://tei:8080/rerank", "tei", 16, 0.5)
    assert rerank.api_key is not None
    assert rerank.api_key.get_secret_value() == "rk-secret"
    assert "rk-secret" not in repr(rerank)


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [("PROTOCOL", "openai", "protocol"), ("TOP_N", "0", "top_n"), ("TIMEOUT", "0", "timeout")],
)
def test_bad_values_name_the_field(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str) -> None:
    monkeypatch.setenv(f"MEMPLANE_RERANK__{variable}", value)
    with pytest.raises(ValidationError, match=rf"rerank\.{field}"):
        Settings()
