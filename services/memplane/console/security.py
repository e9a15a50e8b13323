"""The page's walls: security headers on every response, and the same-origin check of
every state-changing request (the CSRF token itself is checked per session in `api`).

The Content Security Policy allows scripts, styles, images and fetches from the
console's own origin only: no inline script, no plugin, no framing. Memory text is set
with textContent by the page, so even a policy bypass would find nothing to run.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SecurityHeaders:
    """ASGI middleware: `HEADERS` on every HTTP response (a header the app set itself,
    e.g. a static file's cache-control, is replaced)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + list(HEADERS)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def cross_site(request: Request) -> str | None:
    """Why *request* looks cross-site, or None when it comes from the console's own page.
    A browser sends Origin on every POST / PATCH / DELETE made by fetch: its host must be
    the request's Host (the scheme may differ behind a TLS-terminating ingress). A
    `Sec-Fetch-Site` other than same-origin (or none: typed by the person) is refused too.
    A request with neither header (curl, a script) passes here; the CSRF token still applies."""
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        if origin == "null" or urlsplit(origin).netloc.lower() != host.lower():
            return f"Origin {origin!r} is not this console's"
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in {"same-origin", "none"}:
        return f"Sec-Fetch-Site is {site!r}"
    return None


def client_address(request: Request) -> str:
    """The peer's address (the key of the sign-in rate limit); "unknown" without one.
    Behind a proxy this is the proxy's, unless `memplane console --forwarded-allow-ips`
    names the proxy (uvicorn then takes the address from X-Forwarded-For)."""
    return request.client.host if request.client else "unknown"
