"""`DockerSandboxes`: a container per workspace over the Docker Engine API (aiodocker),
tested against Podman's Docker-compatible socket.

The container runs `sleep infinity` from *image* with no network (by default) and 1,024 open files and
processes; the sandbox root is `/sandbox` inside it (its working directory). Suspending
stops the container (its files stay in its writable layer); `ensure` starts it again;
destroying removes it with its files. File I/O is tar over the archive API (what `docker
cp` does) and `exec`; listing, deleting and symlink resolution come from the base class
(`find`, `rm`, `realpath -m`) and commands run under coreutils' `timeout`, so the image
needs a POSIX shell with GNU coreutils and findutils (a Debian minbase has them).
Install with `pip install 'memplane[sandbox-docker]'`.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import tarfile
import time
import uuid
from collections.abc import Mapping

import aiodocker
from aiodocker.containers import DockerContainer
from aiodocker.types import JSONValue

from memplane.errors import FailedPreconditionError
from memplane.sandbox.base import (
    PREPARE_WRITE,
    ExecResult,
    SandboxBackend,
    SandboxHandle,
    bounded,
    check_workspace,
    check_written,
    killed_after,
    refuse_path,
)
from memplane.sandbox.errors import SandboxFileNotFoundError, SandboxNotFoundError

SANDBOX_ROOT = "/sandbox"
WORKSPACE_LABEL = "memplane.io/workspace"
_NOT_FOUND, _NOT_MODIFIED, _CONFLICT = 404, 304, 409


class DockerSandboxes(SandboxBackend):
    """Sandboxes as containers named `<name_prefix><workspace>`, labelled with the
    workspace (and *labels*). *docker* is an open `aiodocker.Docker` (the caller closes
    it); *network* the container's network mode ("none": no network); *stop_timeout_seconds*
    is what `suspend` gives the container before SIGKILL."""

    kind = "docker"

    def __init__(
        self,
        docker: aiodocker.Docker,
        image: str,
        *,
        name_prefix: str = "memplane-sandbox-",
        labels: Mapping[str, str] | None = None,
        network: str = "none",
        stop_timeout_seconds: int = 5,
    ) -> None:
        self._docker, self._image, self._prefix = docker, image, name_prefix
        self._network = network
        self._labels = dict(labels or {})
        self._stop_timeout = stop_timeout_seconds
        self._locks: dict[str, asyncio.Lock] = {}

    def _config(self, workspace: str) -> dict[str, JSONValue]:
        limits = [{"Name": name, "Soft": 1024, "Hard": 1024} for name in ("nofile", "nproc")]
        return {
            "Image": self._image,
            "Cmd": ["sleep", "infinity"],
            "WorkingDir": SANDBOX_ROOT,
            "Labels": {**self._labels, WORKSPACE_LABEL: workspace},
            "HostConfig": {"NetworkMode": self._network, "Ulimits": limits},
        }

    async def ensure(self, workspace: str) -> SandboxHandle:
        name = self._prefix + check_workspace(workspace)
        async with self._locks.setdefault(workspace, asyncio.Lock()):  # one create per workspace here
            return await self._ensure(workspace, name)

    async def _ensure(self, workspace: str, name: str) -> SandboxHandle:
        try:
            container = await self._docker.containers.get(name)
        except aiodocker.DockerError as exc:
            if exc.status != _NOT_FOUND:
                raise
            container = await self._create(workspace, name)
        state = (await container.show())["State"]
        if not state["Running"]:
            await container.start()
        return SandboxHandle(self.kind, workspace, container.id, SANDBOX_ROOT)

    async def _create(self, workspace: str, name: str) -> DockerContainer:
        """Create the container; a concurrent `ensure` that created it first wins (409).
        Raises `FailedPreconditionError` naming the image when the engine refuses."""
        try:
            return await self._docker.containers.create(self._config(workspace), name=name)
        except aiodocker.DockerError as exc:
            if exc.status == _CONFLICT or "already in use" in exc.message:  # another process was first
                return await self._docker.containers.get(name)
            raise FailedPreconditionError(f"cannot create a sandbox from image {self._image!r}: {exc.message}") from exc

    async def suspend(self, handle: SandboxHandle) -> None:
        try:
            await self._container(handle).stop(t=self._stop_timeout)
        except aiodocker.DockerError as exc:
            if exc.status not in (_NOT_FOUND, _NOT_MODIFIED):
                raise

    async def destroy(self, handle: SandboxHandle) -> None:
        try:
            await self._container(handle).delete(force=True)
        except aiodocker.DockerError as exc:
            if exc.status != _NOT_FOUND:
                raise

    def _container(self, handle: SandboxHandle) -> DockerContainer:
        if handle.backend != self.kind:
            raise SandboxNotFoundError(handle.workspace)
        return self._docker.containers.container(handle.ref)

    async def _exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str, timeout_seconds: float) -> ExecResult:
        return await bounded(self._run(handle, killed_after(timeout_seconds, argv), cwd), argv, timeout_seconds)

    async def _run(self, handle: SandboxHandle, command: list[str], cwd: str) -> ExecResult:
        try:
            execution = await self._container(handle).exec(cmd=command, stdout=True, stderr=True, workdir=cwd)
        except aiodocker.DockerError as exc:
            if exc.status in (_NOT_FOUND, _CONFLICT):  # gone, or stopped (suspended without ensure)
                raise SandboxNotFoundError(handle.workspace) from None
            raise
        out, err = bytearray(), bytearray()
        async with execution.start(detach=False) as stream:
            while (message := await stream.read_out()) is not None:
                (out if message.stream == 1 else err).extend(message.data)
        code = (await execution.inspect())["ExitCode"]
        return ExecResult(int(code if code is not None else -1), bytes(out), bytes(err))

    def _relative(self, path: str) -> str:
        return posixpath.relpath(path, SANDBOX_ROOT)

    async def _read(self, handle: SandboxHandle, path: str) -> bytes:
        try:
            archive = await self._container(handle).get_archive(path)
        except aiodocker.DockerError as exc:
            if exc.status == _NOT_FOUND:
                raise SandboxFileNotFoundError(self._relative(path)) from None
            raise
        with archive:
            member = archive.next()
            data = archive.extractfile(member) if member is not None and member.isfile() else None
            if data is None:
                raise SandboxFileNotFoundError(self._relative(path))
            return data.read()

    async def _write(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        parent, name = posixpath.split(path)
        made = await self._run(handle, ["sh", "-c", PREPARE_WRITE, "sh", parent, path], "/")
        refuse_path(made, self._relative(path))
        temporary = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(temporary)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            archive.addfile(info, io.BytesIO(data))
        await self._container(handle).put_archive(parent, buffer.getvalue())  # type: ignore[no-untyped-call]
        moved = await self._run(handle, ["mv", "-f", "-T", "--", posixpath.join(parent, temporary), path], "/")
        check_written(moved, self._relative(path))
