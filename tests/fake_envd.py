"""A loopback envd (E2B's in-sandbox daemon) for tests, serving every sandbox of a
`tests.fake_e2b.FakeE2B` at one URL (the SDK's `sandbox_url`) and telling them apart by
the ``E2b-Sandbox-Id`` header the SDK sends, as E2B's proxy does. What it speaks is
envd's:

- ``GET /health`` -> 204;
- ``GET /files?path=P`` -> the bytes (404 no such path, 400 a directory: envd's
  `download.go`); ``POST /files?path=P`` with an ``application/octet-stream`` body ->
  200 [{name, type, path}] (parents created);
- the Connect services ``process.Process`` (``Start``: a server stream of start, data,
  end events; ``SendSignal``) through the SDK's own generated ``ProcessASGIApplication``.

A relative path is under the sandbox user's home (``<sandbox dir>/home/user``), an
absolute one is the host's own path: the fake runs on the host, so a sandbox's root is a
host directory and its commands are host processes (``/bin/bash -l -c <line>``, HOME the
sandbox home, a minimal PATH). It is no isolation boundary: only for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from e2b.envd.process.process_connect import Process, ProcessASGIApplication
from e2b.envd.process.process_pb import (
    ProcessEvent,
    SendSignalRequest,
    SendSignalResponse,
    Signal,
    StartRequest,
    StartResponse,
)
from protobuf import Oneof
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.fake_e2b import FakeE2B, FakeSandbox

_PATH = "/usr/local/bin:/usr/bin:/bin"
_CHUNK = 32 * 1024


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def _resolve(box: FakeSandbox, path: str) -> Path:
    return Path(path) if path.startswith("/") else box.home / path


class _Process(Process):
    """envd's process service for the sandbox named by each request's header (what is
    not implemented here answers UNIMPLEMENTED, from the generated base)."""

    def __init__(self, cloud: FakeE2B) -> None:
        self._cloud = cloud

    def _box(self, ctx: RequestContext[Any, Any]) -> FakeSandbox:
        box = self._cloud.running(ctx.request_headers.get("e2b-sandbox-id", ""))
        if box is None:
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found")
        return box

    async def start(
        self, request: StartRequest, ctx: RequestContext[StartRequest, StartResponse]
    ) -> AsyncIterator[StartResponse]:
        box = self._box(ctx)
        config = request.process
        if config is None or not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "no process to start")
        cwd = _resolve(box, config.cwd) if config.cwd else box.home
        if not cwd.is_dir():
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{cwd}' does not exist")
        env = {"PATH": _PATH, "HOME": str(box.home), "USER": "user", "LANG": "C.UTF-8", **dict(config.envs)}
        process = await asyncio.create_subprocess_exec(
            config.cmd, *config.args, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        box.processes[process.pid] = process
        try:
            yield StartResponse(event=ProcessEvent(event=Oneof("start", ProcessEvent.StartEvent(pid=process.pid))))
            queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()

            async def pump(name: str, stream: asyncio.StreamReader) -> None:
                while chunk := await stream.read(_CHUNK):
                    await queue.put((name, chunk))
                await queue.put(None)

            assert process.stdout is not None
            assert process.stderr is not None
            pumps = [
                asyncio.create_task(pump(name, stream))
                for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
            ]
            open_streams = len(pumps)
            while open_streams:
                item = await queue.get()
                if item is None:
                    open_streams -= 1
                    continue
                data = ProcessEvent.DataEvent(output=Oneof(item[0], item[1]))
                yield StartResponse(event=ProcessEvent(event=Oneof("data", data)))
            code = await process.wait()
            status = f"exit status {code}" if code >= 0 else f"signal: {signal.Signals(-code).name.lower()[3:]}"
            end = ProcessEvent.EndEvent(exit_code=code if code >= 0 else 128 - code, exited=code >= 0, status=status)
            yield StartResponse(event=ProcessEvent(event=Oneof("end", end)))
        finally:
            box.processes.pop(process.pid, None)
            if process.returncode is None:  # the client went away: end what it started
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()

    async def send_signal(
        self, request: SendSignalRequest, ctx: RequestContext[SendSignalRequest, SendSignalResponse]
    ) -> SendSignalResponse:
        box = self._box(ctx)
        selector = request.process.selector if request.process is not None else None
        pid = selector.value if isinstance(selector, Oneof) and selector.field == "pid" else None
        process = box.processes.get(pid) if isinstance(pid, int) else None
        if process is None:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        number = signal.SIGKILL if request.signal == Signal.SIGKILL else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, number)
        return SendSignalResponse()


def envd_app(cloud: FakeE2B) -> ASGIApp:
    """The envd ASGI app over *cloud*'s sandboxes."""

    def box_of(request: Request) -> FakeSandbox | None:
        return cloud.running(request.headers.get("e2b-sandbox-id", ""))

    async def health(request: Request) -> Response:
        return Response(status_code=204) if box_of(request) else _error(502, "The sandbox was not found")

    async def download(request: Request) -> Response:
        box = box_of(request)
        if box is None:
            return _error(502, "The sandbox was not found")
        path = _resolve(box, request.query_params.get("path", ""))
        if not path.exists():
            return _error(404, f"path '{path}' does not exist")
        if path.is_dir():
            return _error(400, f"path '{path}' is a directory")
        return Response(path.read_bytes(), media_type="application/octet-stream")

    async def upload(request: Request) -> Response:
        box = box_of(request)
        if box is None:
            return _error(502, "The sandbox was not found")
        if request.headers.get("content-type") != "application/octet-stream":
            return _error(400, "this fake envd takes application/octet-stream uploads only")
        path = _resolve(box, request.query_params.get("path", ""))
        if path.is_dir():
            return _error(400, f"path '{path}' is a directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(await request.body())
        except (NotADirectoryError, FileExistsError) as exc:
            return _error(400, f"error creating '{path}': {exc}")
        return JSONResponse([{"name": path.name, "type": "file", "path": str(path)}])

    process = ProcessASGIApplication(_Process(cloud))
    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/files", download, methods=["GET"]),
            Route("/files", upload, methods=["POST"]),
        ]
    )

    async def routed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(f"{process.path}/"):
            await process(scope, receive, send)  # type: ignore[arg-type]
        else:
            await app(scope, receive, send)

    return routed
