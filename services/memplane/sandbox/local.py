"""`LocalSandboxes`: a directory per workspace under one root (a PVC in a cluster).

The file API is confined to the workspace's directory. `exec` runs the program on the
host with the directory as its working directory and a minimal environment (PATH, HOME
= the directory, LANG): it is *not* an isolation boundary — a program can reach outside
it. Use the docker, pod or e2b backends where agents run untrusted commands.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

from memplane.sandbox.base import DirEntry, ExecResult, SandboxBackend, SandboxHandle, check_workspace
from memplane.sandbox.errors import (
    SandboxExecTimeoutError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
    SandboxPathError,
)

_EXEC_PATH = "/usr/local/bin:/usr/bin:/bin"


class LocalSandboxes(SandboxBackend):
    """Sandboxes as directories `<root>/<workspace>` (created on `ensure`, mode 0700).
    Suspending keeps the directory as it is (there is no compute to release)."""

    kind = "local"

    def __init__(self, root: Path) -> None:
        self._root = root.resolve()

    async def ensure(self, workspace: str) -> SandboxHandle:
        directory = self._root / check_workspace(workspace)
        await asyncio.to_thread(directory.mkdir, mode=0o700, parents=True, exist_ok=True)
        return SandboxHandle(self.kind, workspace, str(directory), str(directory))

    async def suspend(self, handle: SandboxHandle) -> None:
        self._directory(handle)  # a foreign handle is refused; nothing to release

    async def destroy(self, handle: SandboxHandle) -> None:
        directory = self._directory(handle)
        await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)

    def _directory(self, handle: SandboxHandle) -> Path:
        """The handle's directory, checked to be this backend's; `SandboxNotFoundError`
        for a handle of another kind, root or workspace."""
        directory = self._root / check_workspace(handle.workspace)
        if handle.backend != self.kind or Path(handle.ref) != directory:
            raise SandboxNotFoundError(handle.workspace)
        return directory

    def _live(self, handle: SandboxHandle) -> Path:
        directory = self._directory(handle)
        if not directory.is_dir():
            raise SandboxNotFoundError(handle.workspace)
        return directory

    async def _exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str, timeout_seconds: float) -> ExecResult:
        home = self._live(handle)
        env = {"PATH": _EXEC_PATH, "HOME": str(home), "LANG": "C.UTF-8"}
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
        except OSError as exc:  # no such program, or not executable: as a shell says it
            return ExecResult(127, b"", f"{argv[0]}: {exc.strerror or exc}".encode())
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_seconds)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise SandboxExecTimeoutError(argv, timeout_seconds) from None
        return ExecResult(process.returncode or 0, stdout, stderr)

    async def _realpath(self, handle: SandboxHandle, path: str) -> str:
        self._live(handle)
        return await asyncio.to_thread(os.path.realpath, path)

    async def _read(self, handle: SandboxHandle, path: str) -> bytes:
        self._live(handle)
        try:
            return await asyncio.to_thread(Path(path).read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise SandboxFileNotFoundError(self._relative(handle, path)) from None

    async def _write(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        self._live(handle)
        try:
            await asyncio.to_thread(_write_atomically, Path(path), data)
        except IsADirectoryError:
            raise SandboxPathError(self._relative(handle, path), "is a directory") from None
        except (NotADirectoryError, FileExistsError):
            raise SandboxPathError(self._relative(handle, path), "has a file where a directory must be") from None

    async def _list(self, handle: SandboxHandle, path: str) -> list[DirEntry]:
        self._live(handle)
        try:
            return await asyncio.to_thread(_scan, path)
        except (FileNotFoundError, NotADirectoryError):
            raise SandboxFileNotFoundError(self._relative(handle, path)) from None

    async def _delete(self, handle: SandboxHandle, path: str) -> bool:
        self._live(handle)
        return await asyncio.to_thread(_remove, Path(path))

    def _relative(self, handle: SandboxHandle, path: str) -> str:
        return os.path.relpath(path, os.path.realpath(handle.root))


def _write_atomically(path: Path, data: bytes) -> None:
    """Write *data* to a temporary file beside *path* and rename it over *path*, so a
    reader sees the old bytes or the new ones, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _scan(path: str) -> list[DirEntry]:
    entries = []
    with os.scandir(path) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir()
                size = None if is_dir else entry.stat().st_size
            except OSError:  # a broken symlink, or gone since the listing
                is_dir, size = False, None
            entries.append(DirEntry(entry.name, is_dir, size))
    return entries


def _remove(path: Path) -> bool:
    if path.is_symlink() or path.is_file():
        path.unlink()
        return True
    if path.is_dir():
        shutil.rmtree(path)
        return True
    return False
