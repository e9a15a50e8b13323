"""One sync pass at a time per sandbox: a lock kept in the sandbox itself, so passes from
different processes or hosts (a `memplane sync --watch`, a person's one-shot
`memplane sync`, an agent's sidecar) exclude each other on any backend.

The lock is the directory ``Memory/.memplane-sync.lock``, made with POSIX ``mkdir`` (atomic:
exactly one of two racing passes makes it) through the backend's `exec`, with a file
``owner`` written in the same command: a random token, the time taken (UNIX seconds), the
host and the pid. A pass that finds it held waits (polling 0.1 s, doubling to 2 s) up to
*wait_seconds*, then raises `SyncLockedError` naming the holder. A lock older than
*stale_seconds* (a pass that died holding it; a pass takes seconds, 10,000 memories well
under a minute: bench/mdview_render.py) is broken: renamed away atomically (one breaker
wins), then removed. Release removes the lock only while it holds this pass's token.
The directory is a dot entry of ``Memory/``: the sync's scan and the view leave it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from memplane.errors import UnavailableError
from memplane.mdview.render import MEMORY_DIR
from memplane.sandbox import SandboxBackend, SandboxFileNotFoundError, SandboxHandle

LOCK_DIR = f"{MEMORY_DIR}/.memplane-sync.lock"
OWNER_FILE = f"{LOCK_DIR}/owner"
DEFAULT_WAIT_SECONDS = 60.0
DEFAULT_STALE_SECONDS = 900.0  # 15 minutes
_FIRST_POLL, _LAST_POLL = 0.1, 2.0
# $1 the lock directory, $2 the owner line: made with its owner in one command.
_TAKE = 'mkdir -p -- "$(dirname -- "$1")" && mkdir -- "$1" 2>/dev/null && printf "%s\\n" "$2" > "$1/owner"'


class SyncLockedError(UnavailableError):
    """Another sync pass held the sandbox for longer than this pass would wait; the message
    names the holder (host, pid, since). Try again later."""

    reason = "SYNC_LOCKED"


@dataclass(frozen=True)
class Holder:
    """Who holds the lock, from its owner file."""

    token: str
    since: float
    host: str
    pid: str

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        parts = text.split()
        if len(parts) != 4:
            return None
        try:
            return cls(parts[0], float(parts[1]), parts[2], parts[3])
        except ValueError:
            return None

    def line(self) -> str:
        return f"{self.token} {self.since:.3f} {self.host} {self.pid}"

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.since))}"


async def _holder(backend: SandboxBackend, handle: SandboxHandle) -> Holder | None:
    try:
        return Holder.parse((await backend.read_file(handle, OWNER_FILE)).decode(errors="replace"))
    except SandboxFileNotFoundError:
        return None


async def _take(backend: SandboxBackend, handle: SandboxHandle, me: Holder) -> bool:
    result = await backend.exec(handle, ["sh", "-c", _TAKE, "sh", LOCK_DIR, me.line()], timeout_seconds=10.0)
    return result.ok()


async def _break(backend: SandboxBackend, handle: SandboxHandle, token: str) -> None:
    """Rename the stale lock away (only one breaker's `mv` finds it) and remove it."""
    aside = f"{LOCK_DIR}.stale-{token}"
    moved = await backend.exec(handle, ["mv", "-T", "--", LOCK_DIR, aside], timeout_seconds=10.0)
    if moved.ok():
        await backend.delete(handle, aside)


@contextlib.asynccontextmanager
async def sync_lock(
    backend: SandboxBackend,
    handle: SandboxHandle,
    *,
    wait_seconds: float = DEFAULT_WAIT_SECONDS,
    stale_seconds: float = DEFAULT_STALE_SECONDS,
) -> AsyncIterator[Holder]:
    """Hold the sandbox's sync lock for the block (see the module docstring). Raises
    `SyncLockedError` after *wait_seconds* (seconds) of finding it held by a live pass;
    what `exec` raises (`SandboxNotFoundError`, ...)."""
    token, host, pid = secrets.token_hex(8), socket.gethostname() or "?", str(os.getpid())
    deadline = time.monotonic() + wait_seconds
    poll = _FIRST_POLL
    unnamed_seen = False  # the lock without an owner file twice in a row: its maker died between the two
    while True:
        me = Holder(token, time.time(), host, pid)
        if await _take(backend, handle, me):
            break
        holder = await _holder(backend, handle)
        stale = holder is not None and time.time() - holder.since > stale_seconds
        if stale or (holder is None and unnamed_seen):
            await _break(backend, handle, token)
            continue
        unnamed_seen = holder is None
        if time.monotonic() + poll > deadline:
            held_by = str(holder) if holder is not None else "a pass that has not named itself yet"
            raise SyncLockedError(f"another sync pass holds the sandbox ({held_by}); waited {wait_seconds:g} s")
        await asyncio.sleep(poll)  # the lock's poll interval
        poll = min(poll * 2, _LAST_POLL)
    try:
        yield me
    finally:
        holder = await _holder(backend, handle)
        if holder is not None and holder.token == me.token:
            await backend.delete(handle, LOCK_DIR)
