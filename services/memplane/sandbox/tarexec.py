"""`TarExecIO`: a sandbox's file I/O and commands over one primitive, running a command
with optional stdin and collecting its output — what `kubectl cp` does over `kubectl
exec`. A backend whose only way in is an exec stream (the pod backend) gets `_exec`,
`_read` and `_write` from here by implementing `_stream`.

- `_exec`: ``timeout -s KILL <s> sh -c 'cd -- "$1" || exit 126; shift; exec "$@"' sh
  <cwd> <argv...>`` (exec streams have no working directory of their own); exit 137
  after the timeout is `SandboxExecTimeoutError`, as is the stream outliving it by the
  grace period.
- `_read`: ``tar cf - -C <parent> -- <name>`` after ``test -f`` (a missing path or a
  directory is `SandboxFileNotFoundError`); the one member's bytes.
- `_write`: one command — make the parents, refuse a directory at the path, ``tar xf -``
  a one-member archive of a temporary name from stdin, rename it over the path — so a
  reader sees the old bytes or the new ones.

The sandbox image needs sh, tar and GNU coreutils (`timeout`, `mv -T`, `realpath -m`)
and findutils (the base class's `find -printf`), as a Debian minbase has.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
import uuid
from abc import abstractmethod

from memplane.sandbox.base import (
    WRITE_CHECKS,
    ExecResult,
    SandboxBackend,
    SandboxHandle,
    bounded,
    check_written,
    killed_after,
)
from memplane.sandbox.errors import SandboxFileNotFoundError, SandboxPathError

IO_TIMEOUT_SECONDS = 60.0  # one file read or write
_IN_DIR = 'cd -- "$1" || exit 126; shift; exec "$@"'
_READ = 'test -f "$1" || exit 44; exec tar cf - -C "$2" -- "$3"'
_WRITE = (
    WRITE_CHECKS + 'tar xf - -C "$1" --no-same-owner --no-same-permissions || { rm -f -- "$1/$3"; exit 45; }; '
    'exec mv -f -T -- "$1/$3" "$2"'
)
_NOT_A_FILE = 44


def one_file_archive(name: str, data: bytes) -> bytes:
    """A tar archive (ustar/pax, uncompressed) holding *data* as the regular file *name*
    (mode 0644, mtime now)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def first_file(archive: bytes) -> bytes | None:
    """The bytes of the first member of *archive* if it is a regular file, else None."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as opened:
        member = opened.next()
        data = opened.extractfile(member) if member is not None and member.isfile() else None
        return data.read() if data is not None else None


class TarExecIO(SandboxBackend):
    """File I/O and commands over `_stream` (see the module docstring)."""

    @abstractmethod
    async def _stream(self, handle: SandboxHandle, argv: list[str], stdin: bytes | None) -> ExecResult:
        """Run *argv* (no shell, no timeout of its own: the caller bounds it) in the
        sandbox with *stdin* (sent, then closed) or none; `SandboxNotFoundError` when
        the sandbox is gone or not running."""

    async def _bounded(
        self,
        handle: SandboxHandle,
        argv: list[str],
        stdin: bytes | None,
        timeout_seconds: float,
        *,
        named: list[str] | None = None,
    ) -> ExecResult:
        """`_stream` of *argv* under `timeout -s KILL`; `SandboxExecTimeoutError` (naming
        *named*, by default *argv*) when it was killed at its timeout or the stream
        outlives it by `GRACE_SECONDS`."""
        run = self._stream(handle, killed_after(timeout_seconds, argv), stdin)
        return await bounded(run, named or argv, timeout_seconds)

    async def _exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str, timeout_seconds: float) -> ExecResult:
        in_dir = ["sh", "-c", _IN_DIR, "sh", cwd, *argv]
        return await self._bounded(handle, in_dir, None, timeout_seconds, named=argv)

    async def _read(self, handle: SandboxHandle, path: str) -> bytes:
        parent, name = posixpath.split(path)
        result = await self._bounded(handle, ["sh", "-c", _READ, "sh", path, parent, name], None, IO_TIMEOUT_SECONDS)
        data = first_file(result.stdout) if result.ok() else None
        if result.exit_code == _NOT_A_FILE or (result.ok() and data is None):
            raise SandboxFileNotFoundError(posixpath.relpath(path, handle.root))
        if data is None:
            raise SandboxPathError(posixpath.relpath(path, handle.root), f"cannot be read: {_text(result.stderr)}")
        return data

    async def _write(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        relative = posixpath.relpath(path, handle.root)
        parent, name = posixpath.split(path)
        temporary = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        argv = ["sh", "-c", _WRITE, "sh", parent, path, temporary]
        result = await self._bounded(handle, argv, one_file_archive(temporary, data), IO_TIMEOUT_SECONDS)
        check_written(result, relative)


def _text(stderr: bytes) -> str:
    return stderr.decode(errors="replace").strip()
