"""The console's composition root: `build_app` wires the session store, the sign-in rate
limit, the JSON API and the static page into one Starlette app under the base path."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from memplane.client import AsyncMemplaneClient
from memplane.console.api import ConsoleApi
from memplane.console.cluster import ClusterAccess, MemoryWorkspaces
from memplane.console.errors import error_response
from memplane.console.ratelimit import RateLimiter
from memplane.console.security import HEADERS, SecurityHeaders
from memplane.console.sessions import SessionStore

STATIC = Path(__file__).parent / "static"


def normalize_base_path(base_path: str) -> str:
    """ "" for the root, else "/a/b" (one leading slash, none trailing). Raises
    `ValueError` naming --base-path for characters a URL path cannot hold as they are."""
    path = "/" + base_path.strip("/") if base_path.strip("/") else ""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/")
    if not set(path) <= allowed or "//" in path or "/../" in path + "/" or "/./" in path + "/":
        raise ValueError(f"--base-path: {base_path!r} must be a plain URL path such as /memplane")
    return path


async def _index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


async def _internal_error(request: Request, exc: Exception) -> Response:
    """An unexpected failure's answer: a JSON error without a traceback, carrying the
    security headers itself (Starlette's ServerErrorMiddleware, outside `SecurityHeaders`,
    sends it). uvicorn logs the exception."""
    response = error_response(500, "INTERNAL", "internal error")
    for name, value in HEADERS:
        response.headers[name.decode()] = value.decode()
    return response


def build_app(
    client_factory: Callable[[str], AsyncMemplaneClient],
    *,
    base_path: str = "",
    secure_cookie: bool = False,
    limiter: RateLimiter | None = None,
    store: SessionStore | None = None,
    cluster: MemoryWorkspaces | None = None,
) -> Starlette:
    """The console as an ASGI app. *client_factory* makes a client holding a given API
    key (the target and TLS are its business); *base_path* ("/memplane") prefixes every
    URL; *secure_cookie* marks the session cookie Secure even on plain http (behind a
    TLS-terminating proxy); *cluster* reads the MemoryWorkspaces the admin view shows (default:
    none, and the page says so). Raises `ValueError` for a bad *base_path*."""
    base = normalize_base_path(base_path)
    store = store if store is not None else SessionStore(client_factory)  # an empty store is falsy
    api = ConsoleApi(
        store,
        limiter or RateLimiter(),
        cookie_path=base + "/",
        secure_cookie=secure_cookie,
        cluster=cluster or MemoryWorkspaces(ClusterAccess()),
    )
    inner: list[BaseRoute] = [
        Route("/", _index, methods=["GET", "HEAD"]),
        Mount("/api", routes=api.routes()),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    routes: list[BaseRoute] = inner
    if base:

        async def to_base(request: Request) -> Response:
            return RedirectResponse(base + "/", status_code=308)

        routes = [
            Route(base, to_base, methods=["GET", "HEAD"]),
            Mount(base, routes=inner),
            Route("/", to_base, methods=["GET", "HEAD"]),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await store.close_all()

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Exception: _internal_error})
    app.add_middleware(SecurityHeaders)
    return app
