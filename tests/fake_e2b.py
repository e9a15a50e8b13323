"""A loopback E2B for tests: the control-plane REST API the `e2b` SDK calls (this module)
and each sandbox's envd (tests/fake_envd.py), both on 127.0.0.1, served by uvicorn from a
daemon thread. E2B is a paid cloud service, so this is the one fake here; it speaks the
real wire protocol, its JSON built and parsed by the SDK's own generated models.

Control plane (header ``X-API-KEY`` must be `FakeE2B.api_key`, else 401):
- ``POST /v2/sandboxes`` (NewSandboxV2) -> 201 Sandbox: a new running sandbox whose files
  live in a temporary directory of the host (its home, /home/user, is
  ``<dir>/<id>/home/user``);
- ``GET /v2/sandboxes?metadata=k%3Dv&state=running,paused`` -> 200 [ListedSandbox];
- ``POST /v2/sandboxes/{id}/connect`` -> 200 Sandbox (a paused one resumed: 201), 404
  when killed or unknown;
- ``POST /sandboxes/{id}/pause`` -> 204, 409 already paused, 404 unknown;
- ``DELETE /sandboxes/{id}`` -> 204 (its files removed), 404 unknown.

envd answers only for running sandboxes (else 502 "... was not found", as E2B's proxy
does); pausing or killing a sandbox kills its processes. `FakeE2B.calls` logs
(method, path) of every control-plane call; `FakeE2B.fail_next` makes the next
authenticated control-plane call of a method and path answer an error status instead (a
400 for a template E2B does not have, a 500, a 429 rate limit, a 503), as E2B's API
answers it. Use as a
context manager.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from e2b.api.client.models import ListedSandbox, NewSandboxV2, Sandbox, SandboxState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

ENVD_VERSION = "0.6.7"  # what the fake envd reports: octet-stream uploads, default user


@dataclass
class FakeSandbox:
    """One sandbox: its state ("running", "paused") and files under *home*."""

    sandbox_id: str
    template_id: str
    metadata: dict[str, str]
    started_at: datetime
    timeout_seconds: int
    home: Path
    state: str = "running"
    auto_pause: bool = False
    allow_internet_access: bool | None = None
    processes: dict[int, Any] = field(default_factory=dict)  # pid -> asyncio.subprocess.Process (envd's loop)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


class FakeE2B:
    """The fake cloud: `api_url` (control plane) and `sandbox_url` (envd) to point the
    SDK at, `sandboxes` by id."""

    def __init__(self) -> None:
        self.api_key = f"e2b_{uuid.uuid4().hex}"
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.calls: list[tuple[str, str]] = []
        self.failures: list[tuple[str, str, int, str]] = []  # (method, path, status, message)
        self.lock = threading.Lock()
        self._dir = Path(tempfile.mkdtemp(prefix="fake-e2b-"))
        from tests.fake_envd import envd_app  # envd needs this module's FakeSandbox

        self._servers = [_Served(self._control_app()), _Served(envd_app(self))]

    @property
    def api_url(self) -> str:
        return self._servers[0].url

    @property
    def sandbox_url(self) -> str:
        return self._servers[1].url

    def connection(self) -> dict[str, Any]:
        """The SDK options that point it here (E2BSandboxes' *connection*)."""
        return {"api_key": self.api_key, "api_url": self.api_url, "sandbox_url": self.sandbox_url,
                "http_version": "1.1", "request_timeout": 30.0}  # fmt: skip

    def fail_next(self, status: int, message: str, *, method: str = "POST", path: str = "/v2/sandboxes") -> None:
        """Answer the next authenticated control-plane call of *method* and *path* (by
        default the create) with *status* and E2B's JSON error body ``{"code",
        "message"}``, instead of serving it."""
        with self.lock:
            self.failures.append((method, path, status, message))

    def running(self, sandbox_id: str) -> FakeSandbox | None:
        """The sandbox if it exists and runs (what envd serves), else None."""
        with self.lock:
            box = self.sandboxes.get(sandbox_id)
            return box if box is not None and box.state == "running" else None

    # -- control plane ----------------------------------------------------------------
    def _control_app(self) -> ASGIApp:
        routes = [
            Route("/v2/sandboxes", self._create, methods=["POST"]),
            Route("/v2/sandboxes", self._list, methods=["GET"]),
            Route("/v2/sandboxes/{sandbox_id}/connect", self._connect, methods=["POST"]),
            Route("/sandboxes/{sandbox_id}/pause", self._pause, methods=["POST"]),
            Route("/sandboxes/{sandbox_id}", self._kill, methods=["DELETE"]),
        ]
        app = Starlette(routes=routes)

        async def authenticated(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                self.calls.append((scope["method"], scope["path"]))
                if headers.get(b"x-api-key") != self.api_key.encode():
                    await _error(401, "Invalid API key")(scope, receive, send)
                    return
                with self.lock:
                    due = [f for f in self.failures if f[:2] == (scope["method"], scope["path"])]
                    if due:
                        self.failures.remove(due[0])
                if due:
                    await _error(*due[0][2:])(scope, receive, send)
                    return
            await app(scope, receive, send)

        return authenticated

    def _created(self, box: FakeSandbox) -> dict[str, Any]:
        return Sandbox(
            template_id=box.template_id, sandbox_id=box.sandbox_id, client_id="fake", envd_version=ENVD_VERSION
        ).to_dict()

    async def _create(self, request: Request) -> Response:
        body = NewSandboxV2.from_dict(await request.json())
        sandbox_id = f"i{uuid.uuid4().hex[:19]}"
        home = self._dir / sandbox_id / "home" / "user"
        home.mkdir(parents=True)
        box = FakeSandbox(
            sandbox_id=sandbox_id,
            template_id=body.template_id,
            metadata=dict(body.metadata or {}),
            started_at=datetime.now(UTC),
            timeout_seconds=int(body.timeout) if isinstance(body.timeout, int) else 15,
            home=home,
            auto_pause=body.auto_pause is True,
            allow_internet_access=body.allow_internet_access if isinstance(body.allow_internet_access, bool) else None,
        )
        with self.lock:
            self.sandboxes[sandbox_id] = box
        return JSONResponse(self._created(box), status_code=201)

    async def _list(self, request: Request) -> Response:
        wanted = dict(urllib.parse.parse_qsl(request.query_params.get("metadata", "")))
        wanted = {urllib.parse.unquote(k): urllib.parse.unquote(v) for k, v in wanted.items()}
        states = set(request.query_params.get("state", "running,paused").split(","))
        with self.lock:
            boxes = [
                b
                for b in self.sandboxes.values()
                if b.state in states and all(b.metadata.get(k) == v for k, v in wanted.items())
            ]
        listed = [
            ListedSandbox(
                template_id=b.template_id,
                sandbox_id=b.sandbox_id,
                client_id="fake",
                started_at=b.started_at,
                end_at=b.started_at + timedelta(seconds=b.timeout_seconds),
                cpu_count=2,
                memory_mb=512,
                disk_size_mb=1024,
                state=SandboxState(b.state),
                envd_version=ENVD_VERSION,
                metadata=dict(b.metadata),
            ).to_dict()
            for b in boxes
        ]
        return JSONResponse(listed)

    async def _connect(self, request: Request) -> Response:
        with self.lock:
            box = self.sandboxes.get(request.path_params["sandbox_id"])
            if box is None:
                return _error(404, f"sandbox {request.path_params['sandbox_id']} not found")
            resumed = box.state == "paused"
            box.state = "running"
        return JSONResponse(self._created(box), status_code=201 if resumed else 200)

    async def _pause(self, request: Request) -> Response:
        with self.lock:
            box = self.sandboxes.get(request.path_params["sandbox_id"])
            if box is None:
                return _error(404, "sandbox not found")
            if box.state == "paused":
                return _error(409, "sandbox is already paused")
            box.state = "paused"
        await _stop_processes(box)
        return Response(status_code=204)

    async def _kill(self, request: Request) -> Response:
        with self.lock:
            box = self.sandboxes.pop(request.path_params["sandbox_id"], None)
        if box is None:
            return _error(404, "sandbox not found")
        await _stop_processes(box)
        shutil.rmtree(box.home.parent.parent, ignore_errors=True)
        return Response(status_code=204)

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        for served in self._servers:
            served.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> FakeE2B:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


async def _stop_processes(box: FakeSandbox) -> None:
    """Kill what runs in *box* (a pause freezes it, a kill ends it: either way its
    commands end here). Runs on the envd loop's thread only when called from there, so
    the kill is sent with the process' own loop-independent `kill`."""
    for process in list(box.processes.values()):
        if process.returncode is None:
            process.kill()
    box.processes.clear()


class _Served:
    """*app* served by uvicorn on a loopback port from a daemon thread. The socket is
    bound and listening before the thread starts, so a client can connect at once (the
    connection waits in the backlog until uvicorn accepts it)."""

    def __init__(self, app: ASGIApp) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
