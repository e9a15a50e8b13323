"""`E2BSandboxes`: an E2B cloud sandbox per workspace through the `e2b` SDK (2.x).

A workspace's sandbox is found by its metadata (`memplane.workspace` = the workspace
name, and every entry of *metadata*: two backends with different *metadata*, e.g. two
operator SandboxClasses, never take each other's sandboxes), so any process with the same
API key and metadata finds the same sandbox: `ensure` lists the
running and paused sandboxes with that metadata and connects to the oldest (a paused one
is resumed by the connect), else creates one from *template* with the metadata, the
timeout and `on_timeout: pause` (an idle sandbox pauses at its timeout instead of being
killed, so its files survive). `suspend` pauses it (files and memory kept; billing
stops), `destroy` kills it (files gone). Two `ensure` calls of one workspace in one
process create one sandbox; two processes racing on a new workspace can create two (the
oldest is used from then on; the other idles to its timeout).

The sandbox root is *root* resolved inside the sandbox (a relative root is under the
default user's home, `/home/user/memplane` on E2B's base template). File reads and
writes go through envd's `/files` API (exact bytes); a write lands in a temporary file
renamed over the target. `exec` runs through envd's process service, which starts
`bash -l -c <line>`: the argv is quoted with `shlex.join`, so no word is reinterpreted,
and runs under coreutils' `timeout`. Its output comes back as the SDK gives it, UTF-8
text (bytes that are not UTF-8 become U+FFFD). File I/O on a suspended sandbox resumes it
(a connect), as E2B's auto-resume would.

Install with `pip install 'memplane[sandbox-e2b]'`; the API key is *api_key* or the
`E2B_API_KEY` environment variable (read by the SDK).
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import shlex
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from e2b import (
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

from memplane.errors import FailedPreconditionError
from memplane.sandbox.base import (
    GRACE_SECONDS,
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

METADATA_KEY = "memplane.workspace"  # the sandbox metadata naming its workspace
_T = TypeVar("_T")


class E2BSandboxes(SandboxBackend):
    """E2B sandboxes, one per workspace (all arguments keyword-only):

    - *template*: the E2B template name or id sandboxes are created from ("base");
    - *root*: the sandbox root inside the sandbox, relative to the user's home or
      absolute ("memplane");
    - *timeout_seconds*: the sandbox's timeout, set on create and on each connect; at
      its end E2B pauses the sandbox (3,600 s; E2B caps it by plan, 1 h or 24 h);
    - *allow_internet_access*: whether the sandbox may reach the internet (False);
    - *metadata*: more metadata for new sandboxes (e.g. the namespace), beside
      `memplane.workspace`; a sandbox is this backend's only if it carries all of it;
    - *api_key*, *domain*: E2B's API key and domain (default: the SDK's, from
      `E2B_API_KEY` / `E2B_DOMAIN`, domain e2b.app);
    - *connection*: further `e2b.ConnectionConfig` options passed to every SDK call
      (`api_url`, `sandbox_url`, `request_timeout`, `http_version`, `proxy`, ...).
    """

    kind = "e2b"

    def __init__(
        self,
        *,
        template: str = "base",
        root: str = "memplane",
        timeout_seconds: int = 3600,
        allow_internet_access: bool = False,
        metadata: Mapping[str, str] | None = None,
        api_key: str | None = None,
        domain: str | None = None,
        connection: Mapping[str, Any] | None = None,
    ) -> None:
        if not root or "\0" in root:
            raise ValueError(f"root {root!r} must be a non-empty path")
        self._template, self._root, self._timeout = template, root, timeout_seconds
        self._internet = allow_internet_access
        self._metadata = dict(metadata or {})
        self._opts: dict[str, Any] = dict(connection or {})
        if api_key is not None:
            self._opts["api_key"] = api_key
        if domain is not None:
            self._opts["domain"] = domain
        self._connected: dict[str, AsyncSandbox] = {}  # sandbox id -> connection
        self._locks: dict[str, asyncio.Lock] = {}

    # -- lifecycle ------------------------------------------------------------------
    async def ensure(self, workspace: str) -> SandboxHandle:
        check_workspace(workspace)
        async with self._locks.setdefault(workspace, asyncio.Lock()):
            sandbox_id = await self._find(workspace)
            if sandbox_id is None:
                sandbox = await self._create(workspace)
            else:
                sandbox = await self._connect(workspace, sandbox_id)
            root = await self._make_root(sandbox)
            return SandboxHandle(self.kind, workspace, sandbox.sandbox_id, root)

    async def find(self, workspace: str) -> SandboxHandle | None:
        """The handle of the workspace's oldest running or paused sandbox without
        connecting to it (its root unknown: ""), for `suspend` / `destroy`; None if
        there is none."""
        sandbox_id = await self._find(check_workspace(workspace))
        return None if sandbox_id is None else SandboxHandle(self.kind, workspace, sandbox_id, "")

    async def _find(self, workspace: str) -> str | None:
        """The id of the workspace's oldest running or paused sandbox carrying all of
        this backend's metadata, or None."""
        wanted = {**self._metadata, METADATA_KEY: workspace}
        query = SandboxQuery(metadata=wanted, state=[SandboxState.RUNNING, SandboxState.PAUSED])
        paginator = AsyncSandbox.list(query=query, **self._opts)
        found = []
        while paginator.has_next:
            found.extend(await paginator.next_items())
        mine = [s for s in found if all((s.metadata or {}).get(k) == v for k, v in wanted.items())]
        return min(mine, key=lambda s: (s.started_at, s.sandbox_id)).sandbox_id if mine else None

    async def _create(self, workspace: str) -> AsyncSandbox:
        sandbox = await AsyncSandbox.create(
            template=self._template,
            timeout=self._timeout,
            metadata={**self._metadata, METADATA_KEY: workspace},
            allow_internet_access=self._internet,
            lifecycle={"on_timeout": "pause"},
            **self._opts,
        )
        self._connected[sandbox.sandbox_id] = sandbox
        return sandbox

    async def _connect(self, workspace: str, sandbox_id: str) -> AsyncSandbox:
        """A connection to the sandbox (resuming it if paused), kept for later calls;
        `SandboxNotFoundError` when E2B has no such sandbox (killed)."""
        try:
            sandbox = await AsyncSandbox.connect(sandbox_id, timeout=self._timeout, **self._opts)
        except SandboxNotFoundException:
            raise SandboxNotFoundError(workspace) from None
        self._connected[sandbox_id] = sandbox
        return sandbox

    async def _make_root(self, sandbox: AsyncSandbox) -> str:
        """Create the sandbox root and return its absolute, symlink-free path."""
        line = f"mkdir -p -- {shlex.quote(self._root)} && cd -- {shlex.quote(self._root)} && pwd -P"
        try:
            result = await sandbox.commands.run(line, timeout=GRACE_SECONDS)
        except CommandExitException as exc:
            raise FailedPreconditionError(f"cannot create the sandbox root {self._root!r}: {exc.stderr}") from exc
        return str(result.stdout).strip()

    async def suspend(self, handle: SandboxHandle) -> None:
        self._check(handle)
        self._connected.pop(handle.ref, None)
        with contextlib.suppress(SandboxNotFoundException):  # gone: nothing to suspend
            await AsyncSandbox.pause(handle.ref, **self._opts)  # False: it was paused already

    async def destroy(self, handle: SandboxHandle) -> None:
        self._check(handle)
        self._connected.pop(handle.ref, None)
        await AsyncSandbox.kill(handle.ref, **self._opts)  # False: it was gone already

    def _check(self, handle: SandboxHandle) -> None:
        if handle.backend != self.kind:
            raise SandboxNotFoundError(handle.workspace)

    async def _call(self, handle: SandboxHandle, call: Callable[[AsyncSandbox], Awaitable[_T]]) -> _T:
        """*call* on the handle's sandbox. A sandbox paused or killed since it was
        connected is connected again once (resuming a paused one); a killed one raises
        `SandboxNotFoundError`."""
        self._check(handle)
        sandbox = self._connected.get(handle.ref) or await self._connect(handle.workspace, handle.ref)
        try:
            return await call(sandbox)
        except SandboxNotRunningException:
            self._connected.pop(handle.ref, None)
        return await call(await self._connect(handle.workspace, handle.ref))

    # -- primitives -----------------------------------------------------------------
    async def _exec(self, handle: SandboxHandle, argv: list[str], *, cwd: str, timeout_seconds: float) -> ExecResult:
        run = self._call(handle, lambda s: _run(s, argv, cwd, timeout_seconds))
        return await bounded(run, argv, timeout_seconds, deadline=False)  # _run has its own, and kills

    async def _read(self, handle: SandboxHandle, path: str) -> bytes:
        try:
            data = await self._call(handle, lambda s: s.files.read(path, format="bytes"))
        except FileNotFoundException:
            raise SandboxFileNotFoundError(posixpath.relpath(path, handle.root)) from None
        except InvalidArgumentException:  # envd answers 400 for a directory
            if (await self._exec(handle, ["test", "-d", path], cwd="/", timeout_seconds=10.0)).ok():
                raise SandboxFileNotFoundError(posixpath.relpath(path, handle.root)) from None
            raise
        return bytes(data)

    async def _write(self, handle: SandboxHandle, path: str, data: bytes) -> None:
        relative = posixpath.relpath(path, handle.root)
        parent, name = posixpath.split(path)
        made = await self._exec(handle, ["sh", "-c", PREPARE_WRITE, "sh", parent, path], cwd="/", timeout_seconds=10.0)
        refuse_path(made, relative)
        temporary = posixpath.join(parent, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        await self._call(handle, lambda s: s.files.write(temporary, data, use_octet_stream=True))
        moved = await self._exec(handle, ["mv", "-f", "-T", "--", temporary, path], cwd="/", timeout_seconds=10.0)
        check_written(moved, relative)


async def _run(sandbox: AsyncSandbox, argv: list[str], cwd: str, timeout_seconds: float) -> ExecResult:
    """Run *argv* in *cwd* under `timeout -s KILL`; the process is killed when the
    stream outlives the timeout and its grace (`TimeoutError`)."""
    line = shlex.join(killed_after(timeout_seconds, argv))
    process = await sandbox.commands.run(line, background=True, cwd=cwd, timeout=timeout_seconds + GRACE_SECONDS)
    try:
        async with asyncio.timeout(timeout_seconds + GRACE_SECONDS):
            done = await process.wait()
    except CommandExitException as exc:
        return ExecResult(exc.exit_code, (exc.stdout or "").encode(), (exc.stderr or "").encode())
    except (TimeoutError, TimeoutException):  # ours, or the SDK's stream deadline
        await process.kill()
        raise TimeoutError from None
    return ExecResult(done.exit_code, (done.stdout or "").encode(), (done.stderr or "").encode())
