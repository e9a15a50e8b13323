"""Where the admin key is configured: the environment or a mounted file, never both."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from memplane.errors import FailedPreconditionError
from memplane.server.credentials import configured_admin_key
from memplane.server.settings import Settings

KEY = "mp_unit_" + "k" * 43


def test_the_key_file_is_read_stripped_of_its_newline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "admin-key").write_text(KEY + "\n")
    monkeypatch.delenv("MEMPLANE_AUTH__ADMIN_KEY", raising=False)
    monkeypatch.setenv("MEMPLANE_AUTH__ADMIN_KEY_FILE", str(tmp_path / "admin-key"))
    assert configured_admin_key(Settings().auth) == KEY


def test_the_environment_key_needs_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMPLANE_AUTH__ADMIN_KEY", KEY)
    monkeypatch.delenv("MEMPLANE_AUTH__ADMIN_KEY_FILE", raising=False)
    assert configured_admin_key(Settings().auth) == KEY


def test_nothing_configured_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMPLANE_AUTH__ADMIN_KEY", raising=False)
    monkeypatch.delenv("MEMPLANE_AUTH__ADMIN_KEY_FILE", raising=False)
    assert configured_admin_key(Settings().auth) is None


def test_both_are_refused_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMPLANE_AUTH__ADMIN_KEY", KEY)
    monkeypatch.setenv("MEMPLANE_AUTH__ADMIN_KEY_FILE", str(tmp_path / "admin-key"))
    with pytest.raises(ValidationError, match="MEMPLANE_AUTH__ADMIN_KEY and MEMPLANE_AUTH__ADMIN_KEY_FILE"):
        Settings()


@pytest.mark.parametrize("content", [None, "", " \n"])
def test_a_missing_or_empty_file_is_a_clear_error_naming_it(
    content: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "admin-key"
    if content is not None:
        path.write_text(content)
    monkeypatch.delenv("MEMPLANE_AUTH__ADMIN_KEY", raising=False)
    monkeypatch.setenv("MEMPLANE_AUTH__ADMIN_KEY_FILE", str(path))
    with pytest.raises(FailedPreconditionError, match=str(path)):
        configured_admin_key(Settings().auth)
