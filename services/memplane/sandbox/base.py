"""`SandboxBackend`: the one sandbox interface, after AgentScope's `BackendBase`
(`agentscope/tool/_builtin/_backend.py`).

A backend keeps one sandbox per workspace. The operator drives the lifecycle
(`ensure` / `suspend` / `destroy`); the services do file I/O through the public methods,
which take paths relative to the sandbox root as POSIX strings and refuse every path
that would leave it (absolute, ``..``, or through a symlink). Each backend implements
three primitives whose mechanism differs per environment — `_exec`, `_read`, `_write`
— on absolute paths already confined; listing, deleting and resolving symlinks are
derived from `_exec` (POSIX `find`, `rm`, `realpath`), and a backend with a cheaper
native path (the local one) overrides them.

Confinement is checked before each operation (resolve, then act): a symlink swapped in
between the check and the act by a process *inside* the sandbox is not caught. The
services are the only writers besides the agent, whose own tools see the same tree.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import ClassVar

from memplane.domain.names import WORKSPACE_NAME
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.sandbox.errors import SandboxExecTimeoutError, SandboxFileNotFoundError, SandboxPathError
from memplane.sandbox.paths import ROOT, confine, is_within, join_root

DEFAULT_EXEC_TIMEOUT = 60.0  # seconds
KILLED = 137  # 128 + SIGKILL: what `timeout -s KILL` exits with
GRACE_SECONDS = 10.0  # beyond a command's own timeout, for the API round trips
# type (symlinks followed: -L; "l" for a broken one), size in bytes, name (last: it may
# hold a tab)
_FIND_FORMAT = "%y\\t%s\\t%f\\0"


@dataclass(frozen=True)
class SandboxHandle:
    """A workspace's sandbox: *backend* its kind ("local", ...), *ref* the backend's own
    reference (a directory, a container id, a pod name, an E2B sandbox id) — what the
    operator records in the `MemoryWorkspace` status — and *root* the sandbox root as an
    absolute POSIX path inside the sandbox's environment."""

    backend: str
    workspace: str
    ref: str
    root: str


@dataclass(frozen=True)
class ExecResult:
    """What a command run by `exec` left: its exit status (127: no such program) and its
    output, raw bytes."""

    exit_code: int
    stdout: bytes
    stderr: bytes

    def ok(self) -> bool:
        """Whether the command exited with status 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class DirEntry:
    """One entry of `list_dir`: its base name, whether it is a directory (following a
    symlink), and a file's size in bytes (None for a directory or a broken symlink)."""

    name: str
    is_dir: bool
    size_bytes: int | None = None


def check_workspace(workspace: str) -> str:
    """*workspace* if it is a workspace name (so it is one safe path segment); raises
    `InvalidArgumentError` naming the field `workspace` otherwise."""
    if not WORKSPACE_NAME.match(workspace):
        raise InvalidArgumentError(
            FieldViolation("workspace", f"{workspace!r} is not a workspace name (1-63 of a-z, 0-9, '-')")
        )
    return workspace


# What a sandbox-side script's exit status says of a path it was to write (a
# `SandboxPathError`): one table for every backend that writes through a script.
NOT_A_DIRECTORY, A_DIRECTORY = 42, 43
WRITE_REFUSALS = {NOT_A_DIRECTORY: "has a file where a directory must be", A_DIRECTORY: "is a directory"}
# ``sh -c PREPARE_WRITE sh <parent> <path>``: make the parents, refuse a directory at the
# path (WRITE_CHECKS, which a script that goes on to write starts with).
WRITE_CHECKS = f'mkdir -p -- "$1" 2>/dev/null || exit {NOT_A_DIRECTORY}; test -d "$2" && exit {A_DIRECTORY}; '
PREPARE_WRITE = WRITE_CHECKS + "exit 0"


def refuse_path(result: ExecResult, relative: str) -> None:
    """Raise `SandboxPathError` naming the sandbox path *relative* when *result*'s exit
    status is one of `WRITE_REFUSALS` (a file where a directory must be, a directory)."""
    why = WRITE_REFUSALS.get(result.exit_code)
    if why is not None:
        raise SandboxPathError(relative, why)


def check_written(result: ExecResult, relative: str) -> None:
    """`refuse_path`, then `SandboxPathError` ("cannot be written: <stderr>") for any other
    failure of the command that wrote *relative*."""
    refuse_path(result, relative)
    if not result.ok():
        raise SandboxPathError(relative, f"cannot be written: {result.stderr.decode(errors='replace').strip()}")


def killed_after(timeout_seconds: float, argv: list[str]) -> list[str]:
    """*argv* run under coreutils' ``timeout -s KILL <timeout_seconds>`` (how the remote
    backends bound a command inside the sandbox)."""
    return ["timeout", "-s", "KILL", f"{timeout_seconds:g}", *argv]


async def bounded(
    run: Awaitable[ExecResult], argv: list[str], timeout_seconds: float, *, deadline: bool = True
) -> ExecResult:
    """The result of *run*, a command started as `killed_after(timeout_seconds, ...)`.
    Raises `SandboxExecTimeoutError` naming *argv* when it exited 137 (killed) at or after
    its timeout, or when *run* raises `TimeoutError`: its own, or (with *deadline*) the
    stream outliving the timeout by `GRACE_SECONDS`. A *run* with its own deadline (that
    kills the process when it passes) takes ``deadline=False``."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_seconds + GRACE_SECONDS if deadline else None):
            result = await run
    except TimeoutError:
        raise SandboxExecTimeoutError(argv, timeout_seconds) from None
    if result.exit_code == KILLED and time.monotonic() - started >= timeout_seconds:
        raise SandboxExecTimeoutError(argv, timeout_seconds)
    return result


class SandboxBackend(ABC):
    """One sandbox per workspace. Lifecycle calls are idempotent: `ensure` of an existing
    (or suspended) sandbox returns its handle with its files; `suspend` and `destroy` of
    an absent one do nothing. File I/O on a destroyed sandbox raises
    `SandboxNotFoundError`; a bad path `SandboxPathError` (INVALID_ARGUMENT, naming it)."""

    kind: ClassVar[str]

    # -- lifecycle (the operator) ---------------------------------------------------
    @abstractmethod
    async def ensure(self, workspace: str) -> SandboxHandle:
        """The running sandbox of *workspace*, created (empty) or resumed as needed."""

    @abstractmethod
    async def suspend(self, handle: SandboxHandle) -> None:
        """Release the sandbox's compute, keeping its files; `ensure` resumes it."""

    @abstractmethod
    async def destroy(self, handle: SandboxHandle) -> None:
        """Delete the sandbox and every file in it."""

    # -- primitives (absolute, confined paths) --------------------------------------
    @abstractmethod
    async def _exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str, timeout_seconds: float) -> ExecResult:
        """Run *argv* (no shell) in *cwd*; `SandboxExecTimeoutError` after *timeout_seconds*."""

    @abstractmethod
    async def _read(self, handle: SandboxHandle, path: str) -> bytes:
        """The bytes of the file at *path*; `SandboxFileNotFoundError` if there is none."""

    @abstractmethod
    async def _write(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        """Replace the file at *path* with *data*, creating parent directories."""

    # -- derived from _exec (overridable) -------------------------------------------
    async def _realpath(self, handle: SandboxHandle, path: str) -> str:
        """*path* with every symlink of its existing part resolved (`realpath -m`)."""
        result = await self._exec(handle, ["realpath", "-m", "--", path], cwd=handle.root, timeout_seconds=10.0)
        if not result.ok():
            raise SandboxPathError(path, f"cannot be resolved: {result.stderr.decode(errors='replace').strip()}")
        return result.stdout.decode().rstrip("\n")

    async def _list(self, handle: SandboxHandle, path: str) -> list[DirEntry]:
        """The entries of the directory *path* (`find -printf`); `SandboxFileNotFoundError`
        when it is no directory."""
        is_dir = await self._exec(handle, ["test", "-d", path], cwd=handle.root, timeout_seconds=10.0)
        argv = ["find", "-L", path, "-mindepth", "1", "-maxdepth", "1", "-printf", _FIND_FORMAT]
        result = await self._exec(handle, argv, cwd=handle.root, timeout_seconds=DEFAULT_EXEC_TIMEOUT)
        if not (is_dir.ok() and result.ok()):
            raise SandboxFileNotFoundError(path)
        entries = []
        for record in result.stdout.decode(errors="surrogateescape").split("\0"):
            if record:
                kind, size, name = record.split("\t", 2)
                entries.append(DirEntry(name, kind == "d", int(size) if kind == "f" else None))
        return entries

    async def _delete(self, handle: SandboxHandle, path: str) -> bool:
        """Delete the file, symlink (not its target) or directory tree at *path*;
        whether there was one."""
        exists = await self._exec(handle, ["test", "-e", path, "-o", "-L", path], cwd=handle.root, timeout_seconds=10.0)
        if not exists.ok():
            return False
        await self._exec(handle, ["rm", "-rf", "--", path], cwd=handle.root, timeout_seconds=DEFAULT_EXEC_TIMEOUT)
        return True

    # -- file I/O (the services) ----------------------------------------------------
    async def _resolve(self, handle: SandboxHandle, path: str, *, allow_root: bool = True) -> str:
        """The absolute path of the sandbox path *path* with its symlinks resolved (the
        path every operation then acts on); raises `SandboxPathError` when `confine`
        refuses it or it resolves outside the root."""
        absolute = join_root(handle.root, confine(path, allow_root=allow_root))
        real_root = await self._realpath(handle, handle.root)
        real = await self._realpath(handle, absolute)
        if not is_within(real_root, real):
            raise SandboxPathError(path, "leaves the sandbox root through a symlink")
        return real

    async def read_file(self, handle: SandboxHandle, path: str) -> bytes:
        """The bytes of the file at sandbox path *path*. Raises `SandboxPathError`,
        `SandboxFileNotFoundError` (no such file, or a directory), `SandboxNotFoundError`."""
        return await self._read(handle, await self._resolve(handle, path, allow_root=False))

    async def write_file(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        """Write *data* to sandbox path *path* (parents created; a symlink at *path* that
        stays inside is followed, one that leaves is refused). Raises `SandboxPathError`,
        `SandboxNotFoundError`."""
        await self._write(handle, await self._resolve(handle, path, allow_root=False), data)

    async def list_dir(self, handle: SandboxHandle, path: str = ROOT) -> list[DirEntry]:
        """The entries of the directory at sandbox path *path* (the root by default),
        sorted by name. Raises `SandboxPathError`, `SandboxFileNotFoundError`,
        `SandboxNotFoundError`."""
        entries = await self._list(handle, await self._resolve(handle, path))
        return sorted(entries, key=lambda e: e.name)

    async def delete(self, handle: SandboxHandle, path: str) -> bool:
        """Delete the file or directory tree at sandbox path *path*; a symlink is removed
        itself, never its target. Returns whether anything was there. Raises
        `SandboxPathError` (also for the root itself), `SandboxNotFoundError`."""
        relative = confine(path, allow_root=False)
        parent = posixpath.dirname(relative) or ROOT
        real_parent = await self._resolve(handle, parent)
        return await self._delete(handle, posixpath.join(real_parent, posixpath.basename(relative)))

    async def exec(
        self, handle: SandboxHandle, argv: list[str], *, cwd: str = ROOT, timeout_seconds: float = DEFAULT_EXEC_TIMEOUT
    ) -> ExecResult:
        """Run *argv* (a program and its arguments, no shell: wrap in ``["sh", "-c",
        line]`` for one) in the sandbox, in sandbox directory *cwd*. Raises
        `InvalidArgumentError` for an empty *argv*, `SandboxExecTimeoutError` after
        *timeout_seconds* (the process is killed), `SandboxPathError`, `SandboxNotFoundError`."""
        if not argv or not argv[0]:
            raise InvalidArgumentError(FieldViolation("argv", "must name a program"))
        directory = await self._resolve(handle, cwd)
        return await self._exec(handle, list(argv), cwd=directory, timeout_seconds=timeout_seconds)
