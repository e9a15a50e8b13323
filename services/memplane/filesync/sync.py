"""Two-way sync of a workspace's Markdown view with a sandbox (issue 13), client-side:
memories are read and written over the SDK (ListMemories, AddMemories, UpdateMemory,
DeleteMemory), files through a `SandboxBackend` — no server internals, so a sync can run
wherever a workspace key and the sandbox are reachable.

One pass (`sync_once`) compares each file under ``Memory/`` with what the last pass left
(`memplane.filesync.state`, by SHA-256):

- an edited memory file -> UpdateMemory of the fields the edit changed, with
  ``expected_version`` the version the file was rendered from;
- a new file with valid frontmatter and no ``memplane_id`` -> AddMemories (in the
  sync's scope); the file is then replaced by the new memory's rendered file;
- a memory file renamed (its ``memplane_id`` found at a new path) -> taken in as an
  edit, then written back under its rendered name;
- a deleted memory file -> DeleteMemory (same ``expected_version``). History keeps it:
  ListMemoryEvents(id) ends with a DELETE event whose ``before`` is the memory, which
  AddMemories can store again (`memplane.client.restore`);
- both sides changed (the file edited and the memory's version moved, or the memory
  gone) -> the file is stored as a new memory with metadata ``conflict: true``,
  ``conflict_with`` (the memory's id) and ``conflict_file``; the memory stays as it is.
  A file deleted in the sandbox whose memory changed since is kept (re-rendered);
- a file that cannot be read back (malformed frontmatter, refused by the server) is
  left as it is and named in ``Memory/.memplane-errors.md``.

Every memory written carries metadata ``synced_by: "file-sync"``: the server records
each change's actor as the API key that made it, so the mark is how a memory's history
tells a file edit from an RPC. Then the view is rendered again and written (only
changed files). ``MEMORY.md`` and the journal are rendered from memplane: an edit to
them is not synced, it is replaced and named in the errors note; a file a person puts
in the journal is kept and named there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from memplane.client.aio import AsyncMemplaneClient
from memplane.client.transfer import list_all_memories
from memplane.domain.models import Memory
from memplane.errors import InvalidArgumentError, NotFoundError, VersionConflictError
from memplane.filesync.convert import memory_from_proto, memory_input
from memplane.filesync.files import FileFields, MalformedFileError, diff, new_memory_parts, parse_file
from memplane.filesync.lock import DEFAULT_WAIT_SECONDS, sync_lock
from memplane.filesync.state import (
    ERRORS_FILE,
    STATE_FILE,
    FileState,
    dump_state,
    errors_note,
    load_state,
    sha256,
)
from memplane.mdview import write_view
from memplane.mdview.render import (
    INDEX_FILE,
    INDEX_MAX_TOKENS,
    JOURNAL_DIR,
    MEMORY_DIR,
    is_current,
    memory_file,
    render_view,
)
from memplane.sandbox import SandboxBackend, SandboxFileNotFoundError, SandboxHandle, SandboxPathError
from memplane.v1 import memory_pb2

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
PROBLEM_EVENT = "memplane.file_sync.problem"  # a span event per file left as it is

FILE_SYNC = "file-sync"
_INDEX = f"{MEMORY_DIR}/{INDEX_FILE}"
_RENDERED_ID = re.compile(rb"^memplane_id:[ \t]*([0-9a-fA-F-]{32,36})[ \t]*\r?$", re.MULTILINE)
_HEAD_BYTES = 2_048
_JOURNAL = f"{MEMORY_DIR}/{JOURNAL_DIR}/"


@dataclass
class SyncReport:
    """What one pass did, by sandbox path: memories *updated*, *added* (new files),
    *deleted*; *conflicts* stored as new memories or kept; *problems* (path -> why) named
    in the errors note; files *written* and *removed* by the re-render."""

    updated: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def changed_memories(self) -> bool:
        """Whether the pass wrote any memory."""
        return bool(self.updated or self.added or self.deleted or self.conflicts)


async def _read(backend: SandboxBackend, handle: SandboxHandle, path: str) -> bytes | None:
    try:
        return await backend.read_file(handle, path)
    except SandboxFileNotFoundError:
        return None


async def _scan(backend: SandboxBackend, handle: SandboxHandle) -> tuple[dict[str, bytes], dict[str, str]]:
    """Path -> bytes of every ``.md`` file of ``Memory/`` and ``Memory/journal/`` (dot
    files — the sync's own, editors' temporaries — left out), and path -> why of those
    the sandbox refuses to read (a symlink leading out of it)."""
    files: dict[str, bytes] = {}
    refused: dict[str, str] = {}
    for directory in (MEMORY_DIR, _JOURNAL.rstrip("/")):
        try:
            entries = await backend.list_dir(handle, directory)
        except SandboxFileNotFoundError:
            continue
        for entry in entries:
            path = f"{directory}/{entry.name}"
            if entry.is_dir or not entry.name.endswith(".md") or entry.name.startswith("."):
                continue
            try:
                data = await _read(backend, handle, path)
            except SandboxPathError as error:
                refused[path] = f"cannot be read: {error}"
                continue
            if data is not None:
                files[path] = data
    return files, refused


class _Pass:
    """One sync pass: the memories as listed at its start, and what it did."""

    def __init__(self, client: AsyncMemplaneClient, memories: list[Memory], now: datetime, scope: memory_pb2.Scope):
        self.client, self.scope = client, scope
        self.every = {m.id: m for m in memories}
        self.current = {m.id: m for m in memories if is_current(m, now)}
        self.report = SyncReport()
        self.keep: set[str] = set()
        self.moved: set[str] = set()  # ids of memory files found at another path (renamed)
        self.journal_candidates: set[str] = set()  # journal files no pass left: kept unless rendered

    def problem(self, path: str, why: str) -> None:
        """Leave *path* as it is: named in the errors note, a WARNING log record and an
        OpenTelemetry event (PROBLEM_EVENT, attributes ``memplane.file.path`` and
        ``memplane.file.problem``) on the pass's span ``memplane.file_sync``."""
        _log.warning("file sync: %s left as it is: %s", path, why, extra={"path": path, "problem": why})
        trace.get_current_span().add_event(PROBLEM_EVENT, {"memplane.file.path": path, "memplane.file.problem": why})
        self.report.problems[path] = why
        self.keep.add(path)

    async def _add(self, path: str, parsed: FileFields, marks: dict[str, Any], scope: memory_pb2.Scope) -> str | None:
        """Store *parsed* as a new memory; its id, or None after naming the problem."""
        content, extra = new_memory_parts(parsed)
        item = memory_input(
            content=content,
            type=parsed.type,
            name=parsed.name,
            description=parsed.description,
            metadata={**extra, **marks},
            scope=scope,
        )
        try:
            reply = await self.client.add_memories_reply([item])
        except InvalidArgumentError as error:
            self.problem(path, f"refused by memplane: {error}")
            return None
        return reply.memories[0].id

    async def new_file(self, path: str, parsed: FileFields) -> None:
        if await self._add(path, parsed, {"synced_by": FILE_SYNC}, self.scope) is not None:
            self.report.added.append(path)

    async def conflict(self, path: str, parsed: FileFields, memory_id: str) -> None:
        marks = {"synced_by": FILE_SYNC, "conflict": True, "conflict_with": memory_id, "conflict_file": path}
        gone = self.every.get(memory_id)
        scope = self.scope
        if gone:
            scope = memory_pb2.Scope(
                user_id=gone.scope.user_id, agent_id=gone.scope.agent_id, session_id=gone.scope.session_id
            )
        if await self._add(path, parsed, marks, scope) is not None:
            self.report.conflicts.append(path)

    async def edited(self, path: str, parsed: FileFields, memory: Memory, baseline: int) -> None:
        edit = diff(memory, parsed, {"synced_by": FILE_SYNC})
        if edit is None:
            return
        item = memory_input(
            content=edit.content,
            type=edit.type,
            name=edit.name,
            description=edit.description,
            metadata=edit.metadata,
        )
        try:
            await self.client.update_memory(memory.id, item, edit.mask, expected_version=baseline)
        except (VersionConflictError, NotFoundError):  # changed or deleted since the listing
            await self.conflict(path, parsed, memory.id)
        except InvalidArgumentError as error:
            self.problem(path, f"refused by memplane: {error}")
        else:
            self.report.updated.append(path)

    async def deleted(self, path: str, entry: FileState) -> None:
        memory = self.current.get(entry.memplane_id)
        if memory is None:
            return  # deleted on both sides
        if memory.id in self.moved:
            return  # renamed: the file at its new path is taken in (and renamed back)
        kept = f"deleted here, but memory {memory.id} changed in memplane since; it was kept and rendered again"
        if memory.version != entry.memplane_version:
            self.report.conflicts.append(path)
            self.report.problems[path] = kept
            return
        try:
            await self.client.delete_memory(memory.id, expected_version=entry.memplane_version)
        except VersionConflictError:
            self.report.conflicts.append(path)
            self.report.problems[path] = kept
        except NotFoundError:
            return
        else:
            self.report.deleted.append(path)

    async def take_in(self, present: dict[str, bytes], state: dict[str, FileState]) -> None:
        """Take in every file of *present* (path -> bytes) not as *state* remembers it,
        and every deletion of a file *state* has (a path already kept is neither)."""
        for path, head in present.items():
            if path not in state:
                self.moved.update(m.decode() for m in _RENDERED_ID.findall(head[:_HEAD_BYTES]))
        for path in sorted((set(present) | set(state)) - self.keep):
            entry, data = state.get(path), present.get(path)
            if data is not None and entry is not None and entry.sha256 == sha256(data):
                continue
            if path == _INDEX or path.startswith(_JOURNAL):
                if data is not None and entry is not None:
                    self.report.problems[path] = "is rendered from memplane: the edit was not synced and was replaced"
                elif data is not None and path.startswith(_JOURNAL):
                    self.journal_candidates.add(path)
                continue
            if data is None:
                if entry is not None and entry.memplane_id:
                    await self.deleted(path, entry)
                continue
            await self.file(path, data, entry)

    async def file(self, path: str, data: bytes, entry: FileState | None) -> None:
        """Take in the file at *path* (present, and not as the last pass left it)."""
        try:
            parsed = parse_file(data)
        except MalformedFileError as error:
            self.problem(path, str(error))
            return
        memory_id = entry.memplane_id if entry else parsed.memplane_id
        if not memory_id:
            await self.new_file(path, parsed)
            return
        if entry and parsed.memplane_id and parsed.memplane_id != entry.memplane_id:
            self.problem(path, f"its memplane_id was changed from {entry.memplane_id} to {parsed.memplane_id}")
            return
        memory = self.current.get(memory_id)
        if entry:
            baseline = entry.memplane_version
        elif memory is None:
            self.problem(
                path,
                f"names memory {memory_id}, which this workspace does not have (any more): delete the file, "
                "or remove its memplane_id line to store it as a new memory",
            )
            return
        elif data == memory_file(memory).encode():
            return
        else:
            try:
                baseline = parsed.memplane_version()
            except MalformedFileError as error:
                self.problem(path, str(error))
                return
        if memory is None or memory.version != baseline:
            await self.conflict(path, parsed, memory_id)
        else:
            await self.edited(path, parsed, memory, baseline)


def _remembered(files: dict[str, str], state: dict[str, FileState], keep: set[str]) -> dict[str, FileState]:
    """The state after writing the view's *files*: each one's hash and memory; a kept
    file keeps its old entry (so the next pass takes it in again)."""
    remembered = {path: state[path] for path in keep if path in state}
    for path, text in files.items():
        if path in keep:
            continue
        memory_id, version = "", 0
        if path != _INDEX and not path.startswith(_JOURNAL):
            parsed = parse_file(text.encode())
            memory_id, version = parsed.memplane_id, parsed.memplane_version()
        remembered[path] = FileState(sha256(text.encode()), memory_id, version)
    return remembered


async def _memories(client: AsyncMemplaneClient) -> list[Memory]:
    return [memory_from_proto(m) for m in await list_all_memories(client)]


async def sync_once(
    client: AsyncMemplaneClient,
    backend: SandboxBackend,
    handle: SandboxHandle,
    *,
    count_tokens: Callable[[str], int],
    scope: memory_pb2.Scope | None = None,
    max_index_tokens: int = INDEX_MAX_TOKENS,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    lock_wait_seconds: float = DEFAULT_WAIT_SECONDS,
) -> SyncReport:
    """One pass of the sync of *client*'s workspace with the sandbox *handle*: take in
    the sandbox's edits, render the view again, remember it. *scope* is where new files'
    memories go (default: the workspace's empty scope); *count_tokens* and
    *max_index_tokens* bound MEMORY.md as `memplane.mdview.render_view`. The pass holds
    the sandbox's sync lock (`memplane.filesync.lock`), waiting up to
    *lock_wait_seconds* for another pass to finish. Raises `SyncLockedError` (UNAVAILABLE)
    past that wait, what the RPCs raise (`UnauthenticatedError`, `UnavailableError`, ...)
    and the backend (`SandboxNotFoundError`). A pass cut short is run again: every write carries the
    version it expects, so an edit already written shows as a conflict whose copy
    AddMemories finds a duplicate of the updated memory (stored once, nothing lost)."""
    with _tracer.start_as_current_span("memplane.file_sync", attributes={"memplane.sandbox.ref": handle.ref}) as span:
        async with sync_lock(backend, handle, wait_seconds=lock_wait_seconds):
            report = await _pass(
                client, backend, handle, count_tokens=count_tokens, scope=scope, max_index_tokens=max_index_tokens,
                now=now,
            )  # fmt: skip
        span.set_attribute("memplane.file_sync.problems", len(report.problems))
        return report


async def _pass(
    client: AsyncMemplaneClient,
    backend: SandboxBackend,
    handle: SandboxHandle,
    *,
    count_tokens: Callable[[str], int],
    scope: memory_pb2.Scope | None,
    max_index_tokens: int,
    now: Callable[[], datetime],
) -> SyncReport:
    state = load_state(await _read(backend, handle, STATE_FILE))
    present, refused = await _scan(backend, handle)
    run = _Pass(client, await _memories(client), now(), scope or memory_pb2.Scope())
    for path, why in refused.items():
        run.problem(path, why)
    await run.take_in(present, state)
    for path in run.report.added:
        await backend.delete(handle, path)  # the new memory's own file replaces it
    memories = await _memories(client) if run.report.changed_memories() else list(run.every.values())
    view = render_view(memories, now=now(), count_tokens=count_tokens, max_index_tokens=max_index_tokens)
    for path in run.journal_candidates - set(view.files):
        run.problem(path, "is in the journal, which memplane renders from episodic memories: add memories in Memory/")
    written = await write_view(backend, handle, view, keep=run.keep)
    run.report.written, run.report.removed = written.written, written.removed
    new_state = dump_state(_remembered(view.files, state, run.keep))
    if new_state != await _read(backend, handle, STATE_FILE):
        await backend.write_file(handle, STATE_FILE, new_state)
    if run.report.problems:
        await backend.write_file(handle, ERRORS_FILE, errors_note(run.report.problems))
    else:
        await backend.delete(handle, ERRORS_FILE)
    return run.report
