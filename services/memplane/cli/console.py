"""`memplane console`: the web console (`memplane.console`) on a loopback port by default.
It reaches the services at --target (as every command: `memplane.cli.connect`) with the
key each person signs in with; it holds no key of its own and no database connection."""

from __future__ import annotations

import argparse
import socket
import sys

from memplane.cli.connect import client_factory
from memplane.cli.usage import UsageError
from memplane.server.settings import Settings

CONSOLE_EXTRA = "pip install 'memplane[console]'"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memplane console [--host H] [--port P] [--base-path /memplane] [--target ...]`."""
    p = sub.add_parser("console", help="the web console: browse, search, audit and fix memories (http)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080; 0 picks a free one)")
    p.add_argument("--base-path", default="", help="URL prefix the console lives under, e.g. /memplane")
    p.add_argument(
        "--secure-cookie",
        action="store_true",
        help="mark the session cookie Secure (behind a TLS-terminating proxy; automatic over https)",
    )
    p.add_argument(
        "--sign-ins-per-minute",
        type=int,
        default=10,
        metavar="N",
        help="sign-in attempts allowed per client address and minute (and at once); default 10",
    )
    p.add_argument("--target", default=None, help="server host:port (as for every command)")
    p.add_argument("--ca-file", default=None, help="PEM CA bundle that signed the server's TLS certificate")
    p.set_defaults(func=cmd_console)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port. Raises `UsageError` naming --host / --port."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(128)
    except OSError as error:
        raise UsageError(f"--host {host} --port {port}: {error.strerror or error}") from None
    return sock


async def cmd_console(ns: argparse.Namespace, settings: Settings) -> int:
    """Serve the console until SIGINT/SIGTERM. Prints ``memplane console: http://H:P/base/``
    on stdout once it listens (the line the tests wait for). Exit 0; 2 for a bad flag; 1
    without the console extra (starlette, uvicorn)."""
    try:
        import uvicorn

        from memplane.console.app import build_app
        from memplane.console.ratelimit import RateLimiter
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] not in {"starlette", "uvicorn"}:
            raise
        print(f"memplane console: needs the console extra (no module {error.name!r}): {CONSOLE_EXTRA}", file=sys.stderr)
        return 1

    try:
        if ns.sign_ins_per_minute < 1:
            raise ValueError(f"--sign-ins-per-minute: must be 1 or more, not {ns.sign_ins_per_minute}")
        limiter = RateLimiter(burst=ns.sign_ins_per_minute, rate_per_second=ns.sign_ins_per_minute / 60.0)
        app = build_app(
            client_factory(ns, settings, via="console"),
            base_path=ns.base_path,
            secure_cookie=ns.secure_cookie,
            limiter=limiter,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    sock = _bind(ns.host, ns.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    base = ns.base_path.strip("/")
    print(f"memplane console: http://{shown}:{port}/{base + '/' if base else ''}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False)
    server = uvicorn.Server(config)
    await server.serve(sockets=[sock])
    sys.stdout.flush()
    return 0
