"""grpc.drain_seconds (the shutdown drain the chart sets to 5): bad values are refused naming the field."""

from __future__ import annotations

import pydantic
import pytest

from memplane.server.settings import Settings


@pytest.mark.parametrize("bad", ["-1", "301", "soon"])
def test_a_bad_drain_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("MEMPLANE_GRPC__DRAIN_SECONDS", bad)
    with pytest.raises(pydantic.ValidationError, match=r"grpc\.drain_seconds"):
        Settings()


def test_the_drain_defaults_to_zero_and_takes_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().grpc.drain_seconds == 0.0
    monkeypatch.setenv("MEMPLANE_GRPC__DRAIN_SECONDS", "5")
    assert Settings().grpc.drain_seconds == 5.0
