"""Where the admin key comes from: configuration (MEMPLANE_AUTH__ADMIN_KEY, or the file of
MEMPLANE_AUTH__ADMIN_KEY_FILE, a mounted Secret), never written anywhere; or, when nothing
is configured, the local credentials file (data_dir/credentials.json, mode 0600) holding
the admin key and the default workspace's key, written by the server's first local run
and read by the CLI."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from memplane.errors import FailedPreconditionError
from memplane.server.settings import AuthSettings

CREDENTIALS_FILE = "credentials.json"


def configured_admin_key(auth: AuthSettings) -> str | None:
    """The configured admin key (`auth.admin_key`, or the stripped text of
    `auth.admin_key_file`); None when neither is set. Raises `FailedPreconditionError`
    naming the file when it cannot be read or is empty."""
    if auth.admin_key is not None:
        return auth.admin_key.get_secret_value()
    if auth.admin_key_file is None:
        return None
    try:
        key = auth.admin_key_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise FailedPreconditionError(
            f"cannot read MEMPLANE_AUTH__ADMIN_KEY_FILE {auth.admin_key_file}: {error}"
        ) from None
    if not key:
        raise FailedPreconditionError(f"MEMPLANE_AUTH__ADMIN_KEY_FILE {auth.admin_key_file} is empty")
    return key


def read_credentials(path: Path) -> dict[str, str]:
    """The local credentials file as a dict ({} if absent)."""
    if not path.exists():
        return {}
    data: dict[str, str] = json.loads(path.read_text())
    return data


def write_credentials(path: Path, data: dict[str, str]) -> None:
    """Write the credentials file with mode 0600 (created so, never world-readable), by
    rename so a reader never sees half of it. Raises `FailedPreconditionError` naming the
    path when it cannot be written (a read-only filesystem: configure the admin key)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
        tmp.replace(path)
    except OSError as error:
        raise FailedPreconditionError(
            f"cannot write the local credentials file {path} ({error.strerror}): with nothing configured the "
            "first run generates an admin key there; in a cluster set MEMPLANE_AUTH__ADMIN_KEY or "
            "MEMPLANE_AUTH__ADMIN_KEY_FILE (never written to disk)"
        ) from None
