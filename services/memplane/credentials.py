"""The local credentials file (data_dir/credentials.json, mode 0600): the admin key and
the default workspace's key, written by the server's first local run and read by the CLI."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

CREDENTIALS_FILE = "credentials.json"


def read_credentials(path: Path) -> dict[str, str]:
    """The local credentials file as a dict ({} if absent)."""
    if not path.exists():
        return {}
    data: dict[str, str] = json.loads(path.read_text())
    return data


def write_credentials(path: Path, data: dict[str, str]) -> None:
    """Write the credentials file with mode 0600 (created so, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    tmp.replace(path)
