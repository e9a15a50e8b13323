"""What a sync remembers between runs, and what it tells the sandbox's reader.

``Memory/.memplane-sync.json`` — the state file: for every file the last sync left in
the view, its SHA-256 and, for a memory file, the memory id and version it was rendered
from::

    {"format": 1, "files": {"Memory/user_tea_3f2a9c1e.md":
        {"sha256": "<hex>", "memplane_id": "<uuid>", "memplane_version": 3}}}

A file whose hash differs from its entry was edited in the sandbox since; an entry whose
file is gone was deleted there. An unreadable state file counts as none (the next pass
falls back to each file's own ``memplane_version``) and is rewritten.

``Memory/.memplane-errors.md`` — the note naming each file the last pass could not
take in (malformed frontmatter, refused by the server, a conflict it could not settle),
removed when a pass has none.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from memplane.mdview.render import MEMORY_DIR

STATE_FILE = f"{MEMORY_DIR}/.memplane-sync.json"
ERRORS_FILE = f"{MEMORY_DIR}/.memplane-errors.md"
STATE_FORMAT = 1


def sha256(data: bytes) -> str:
    """The hex SHA-256 of *data*."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileState:
    """One file as the last sync left it: its hash, and the memory it shows (id "" and
    version 0 for the index and journal files)."""

    sha256: str
    memplane_id: str = ""
    memplane_version: int = 0


def load_state(data: bytes | None) -> dict[str, FileState]:
    """Path -> `FileState` from the state file's bytes (None: no file); {} for bytes
    that are not a state file of this format."""
    if data is None:
        return {}
    try:
        raw = json.loads(data)
        if raw.get("format") != STATE_FORMAT:
            return {}
        return {
            str(path): FileState(
                str(entry["sha256"]), str(entry.get("memplane_id", "")), int(entry.get("memplane_version", 0))
            )
            for path, entry in raw["files"].items()
        }
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def dump_state(files: dict[str, FileState]) -> bytes:
    """The state file's bytes for *files* (sorted, so equal states are equal bytes)."""
    entries: dict[str, Any] = {}
    for path in sorted(files):
        state = files[path]
        entry: dict[str, Any] = {"sha256": state.sha256}
        if state.memplane_id:
            entry.update(memplane_id=state.memplane_id, memplane_version=state.memplane_version)
        entries[path] = entry
    return (json.dumps({"format": STATE_FORMAT, "files": entries}, indent=1, ensure_ascii=False) + "\n").encode()


def errors_note(problems: dict[str, str]) -> bytes:
    """The text of ``.memplane-errors.md`` for *problems* (path -> what is wrong)."""
    lines = [
        "# Files memplane could not sync",
        "",
        "These files were left as they are; fix them and the next sync takes them in.",
        "",
    ]
    lines += [f"- `{path}`: {problem}" for path, problem in sorted(problems.items())]
    return ("\n".join(lines) + "\n").encode()
