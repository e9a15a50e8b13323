"""An HTTPS proxy tests put between the operator and the API server, as tests/fix_grpc_proxy.py
does for gRPC (and psycopg's tests/fix_proxy.py for PostgreSQL): it forwards every request
as it is and streams every answer (watches included), and it can hold the next request that
matches — never sending it — so the operator can be killed with that one write not made.
It serves with the API server's own certificate (127.0.0.1, signed by the cluster's CA), so
a kubeconfig needs only its address changed (`kubeconfig`).

    proxy = ApiProxy(kube)
    await proxy.start()
    held = proxy.hold("PATCH", "/memoryworkspaces/crash/status")
    await held.reached.wait()      # the operator sent it; the API server never sees it
    ... kill the operator ...
    await proxy.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from tests.fix_kube import KubeCluster

# Hop-by-hop and framing headers: each side of the proxy makes its own.
_NOT_FORWARDED = frozenset({"host", "connection", "content-length", "transfer-encoding", "keep-alive", "upgrade"})
STOP_SECONDS = 2.0  # open watches are cut after this at stop()


@dataclass
class Hold:
    """A request to hold: the one with *method* whose path ends with *suffix* after *skip*
    such requests went through. `body` is what it carried, `reached` is set once it arrived
    (it is never forwarded)."""

    method: str
    suffix: str
    skip: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    body: bytes = b""


class ApiProxy:
    """The proxy in front of *kube*'s API server; `start()` returns its https:// address."""

    def __init__(self, kube: KubeCluster) -> None:
        self.kube = kube
        self.holds: list[Hold] = []
        self.url = ""
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def hold(self, method: str, suffix: str, *, skip: int = 0) -> Hold:
        """Hold the *method* request whose path ends with *suffix* that comes after *skip*
        of them (see `Hold`)."""
        held = Hold(method, suffix, skip)
        self.holds.append(held)
        return held

    async def start(self) -> str:
        pki = self.kube.ca_file.parent
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
        upstream = ssl.create_default_context(cafile=str(self.kube.ca_file))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=upstream),
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, shutdown_timeout=STOP_SECONDS, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def kubeconfig(self, kubeconfig: Path, path: Path) -> Path:
        """A copy of the kubeconfig *kubeconfig* (JSON, as `KubeCluster.kubeconfig_for_token`
        writes it) that reaches the API server through the proxy, written to *path*."""
        config = json.loads(kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        path.write_text(json.dumps(config))
        return path

    def _held(self, request: web.Request) -> Hold | None:
        for held in self.holds:
            if not held.reached.is_set() and request.method == held.method and request.path.endswith(held.suffix):
                if held.skip == 0:
                    return held
                held.skip -= 1
        return None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        held = self._held(request)
        if held is not None:
            held.body = body
            held.reached.set()
            await self._stopping.wait()  # never sent: the client waits until it dies
            raise web.HTTPServiceUnavailable
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        async with self._session.request(
            request.method, self.kube.server + request.path_qs, headers=headers, data=body or None
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _NOT_FORWARDED},
            )
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
                async for chunk in upstream.content.iter_any():  # a watch: each event as it comes
                    await response.write(chunk)
            return response
