"""Putting a rendered `View` into a sandbox: write what changed, leave what did not
(its mtime too: AgentScope ranks memory files by mtime), and remove the files an earlier
render made that the view no longer has — those with a ``memplane_id`` frontmatter line,
and journal days. Files a person or an agent added (no ``memplane_id``) are never
removed: they are new memories for the sync to read."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from memplane.mdview.render import INDEX_FILE, JOURNAL_DIR, MEMORY_DIR, View
from memplane.sandbox import SandboxBackend, SandboxFileNotFoundError, SandboxHandle

_RENDERED_MARK = b"\nmemplane_id: "
_FRONTMATTER_BYTES = 2_048  # where the mark must be found: within the frontmatter


@dataclass(frozen=True)
class WriteReport:
    """Paths written (new or changed), left as they were, and removed."""

    written: list[str]
    unchanged: list[str]
    removed: list[str]


async def _existing(backend: SandboxBackend, handle: SandboxHandle, directory: str) -> list[str]:
    try:
        entries = await backend.list_dir(handle, directory)
    except SandboxFileNotFoundError:
        return []
    return [f"{directory}/{e.name}" for e in entries if not e.is_dir and e.name.endswith(".md")]


async def _rendered_by_us(backend: SandboxBackend, handle: SandboxHandle, path: str) -> bool:
    if path.startswith(f"{MEMORY_DIR}/{JOURNAL_DIR}/"):
        return True
    if path == f"{MEMORY_DIR}/{INDEX_FILE}":
        return False  # always in a view
    head = (await backend.read_file(handle, path))[:_FRONTMATTER_BYTES]
    return head.startswith(b"---") and _RENDERED_MARK in head.split(b"\n---", 1)[0] + b"\n"


async def write_view(
    backend: SandboxBackend, handle: SandboxHandle, view: View, *, keep: Collection[str] = ()
) -> WriteReport:
    """Make the sandbox's ``Memory/`` tree hold *view*, except the paths in *keep*
    (files a sync could not take in: neither written nor removed). Raises what the
    backend raises (`SandboxNotFoundError` for a destroyed sandbox)."""
    written, unchanged, removed = [], [], []
    for path, text in sorted(view.files.items()):
        if path in keep:
            continue
        data = text.encode()
        try:
            same = await backend.read_file(handle, path) == data
        except SandboxFileNotFoundError:
            same = False
        if same:
            unchanged.append(path)
        else:
            await backend.write_file(handle, path, data)
            written.append(path)
    stale = [
        path
        for path in await _existing(backend, handle, MEMORY_DIR)
        + await _existing(backend, handle, f"{MEMORY_DIR}/{JOURNAL_DIR}")
        if path not in view.files and path not in keep and await _rendered_by_us(backend, handle, path)
    ]
    for path in stale:
        await backend.delete(handle, path)
        removed.append(path)
    return WriteReport(written, unchanged, removed)
