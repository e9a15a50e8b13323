"""`database.pool_max_size` unset: 16 for a database at a dsn, twice the host's cores
within 4..16 for the embedded PostgreSQL, never below pool_min_size; a set size wins, and
a size below 1 is refused naming the field (docs/decisions/0005-embedded-pool-sized-to-host.md)."""

from __future__ import annotations

import pydantic
import pytest

from memplane.server import settings as settings_module
from memplane.server.settings import DatabaseSettings, Settings


@pytest.mark.parametrize(("cores", "expected"), [(1, 4), (2, 4), (3, 6), (8, 16), (64, 16)])
def test_the_embedded_pool_is_twice_the_cores_within_4_and_16(
    monkeypatch: pytest.MonkeyPatch, cores: int, expected: int
) -> None:
    monkeypatch.setattr(settings_module, "host_cores", lambda: cores)
    assert DatabaseSettings().pool_max(embedded=True) == (expected, f"the embedded PostgreSQL on {cores} cores")
    assert DatabaseSettings().pool_max(embedded=False) == (16, "a database at a dsn")


def test_a_set_size_wins_and_the_minimum_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_module, "host_cores", lambda: 2)
    assert DatabaseSettings(pool_max_size=7).pool_max(embedded=True) == (7, "database.pool_max_size")
    assert DatabaseSettings(pool_min_size=6).pool_max(embedded=True)[0] == 6


@pytest.mark.parametrize("bad", ["0", "-3", "many", "2.5"])
def test_a_bad_pool_max_size_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("MEMPLANE_DATABASE__POOL_MAX_SIZE", bad)
    with pytest.raises(pydantic.ValidationError, match=r"database\.pool_max_size"):
        Settings()
