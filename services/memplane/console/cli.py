"""`memplane console`: the web console's command line. Needs `pip install
'memplane[console]'` only (no server extra, so no memplane settings: it reads its few
variables itself, as `memplane mcp` does).

Where memplane is: ``--target``, else MEMPLANE_TARGET, else MEMPLANE_GRPC__HOST:
MEMPLANE_GRPC__PORT (each defaulting as the server does: 127.0.0.1, 50051); without
``--target``, MEMPLANE_<SERVICE>_TARGET sends a service elsewhere (as
`AsyncMemplaneClient.from_env`). TLS: an "https://" target or ``--ca-file`` /
MEMPLANE_TLS_CA_FILE. The console holds no key: each person signs in with theirs.
The admin view shows MemoryWorkspace conditions from ``--kubeconfig``'s cluster, or the
Pod's own when run in one (`memplane.console.cluster`).

Prints ``memplane console: http://HOST:PORT/BASE/`` on stdout once it listens.
Exit status: 0 on SIGINT/SIGTERM, 1 for an address in use or an unreadable CA file or
kubeconfig, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from memplane.client.aio import SERVICE_NAMES, AsyncMemplaneClient

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

    from memplane.console.cluster import ClusterAccess

DEFAULT_PORT = 8080
DEFAULT_TIMEOUT_SECONDS = 15.0  # a page waits this long for a hung server, then shows 504


def _default_target(environ: Mapping[str, str]) -> str:
    if environ.get("MEMPLANE_TARGET"):
        return environ["MEMPLANE_TARGET"]
    return f"{environ.get('MEMPLANE_GRPC__HOST') or '127.0.0.1'}:{environ.get('MEMPLANE_GRPC__PORT') or 50051}"


def build_parser(
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser, *, add_help: bool = True
) -> argparse.ArgumentParser:
    """The parser of `memplane console`, of *parser_class* (the `memplane` script passes
    its one-line-error parser, `memplane.cli.usage.Parser`); with *add_help* False, a
    parent of `memplane`'s own ``console`` subcommand. Needs no extra."""
    parser = parser_class(
        prog="memplane console",
        description="The web console: browse, search, audit and fix a workspace's memories (HTTP).",
        add_help=add_help,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    parser.add_argument("--base-path", default="", help="URL prefix the console lives under, e.g. /memplane")
    parser.add_argument(
        "--secure-cookie",
        action="store_true",
        help="mark the session cookie Secure (behind a TLS-terminating proxy; automatic over https)",
    )
    parser.add_argument(
        "--sign-ins-per-minute",
        type=int,
        default=10,
        metavar="N",
        help="sign-in attempts allowed per client address and minute (and at once); default 10",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        default="",
        metavar="IPS",
        help="comma-separated proxy addresses (or *) whose X-Forwarded-For / -Proto are trusted: the sign-in "
        "limit then counts the person's address, not the proxy's (default: none trusted)",
    )
    parser.add_argument(
        "--target",
        default=None,
        help=f"memplane server host:port (default {_default_target(os.environ)}: MEMPLANE_TARGET, "
        "else MEMPLANE_GRPC__HOST:MEMPLANE_GRPC__PORT)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"deadline of each call to memplane; past it the page shows 504 (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--ca-file",
        default=None,
        help="PEM CA bundle that signed the memplane server's certificate; turns TLS on (env MEMPLANE_TLS_CA_FILE)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="PATH",
        help="kubeconfig whose cluster's MemoryWorkspace conditions the admin view shows (default: the Pod's "
        "ServiceAccount when run in one, else none)",
    )
    parser.add_argument(
        "--kube-namespace",
        default=None,
        metavar="NS",
        help="show only this namespace's MemoryWorkspaces (default: every namespace's)",
    )
    return parser


class ConsoleUsageError(Exception):
    """A flag the console cannot use; the message names it."""


def client_factory(ns: argparse.Namespace, environ: Mapping[str, str]) -> Callable[[str], AsyncMemplaneClient]:
    """Clients of the flags' and environment's target and TLS, each holding the key it is
    given and naming the console as its channel (writes recorded as console:<key id>),
    each call's deadline ``--timeout`` seconds (an export's every page has its own).
    Raises `ConsoleUsageError` for an unreadable CA file or a --timeout not above 0."""
    if not ns.timeout > 0:  # NaN too
        raise ConsoleUsageError(f"--timeout: must be more than 0 seconds, not {ns.timeout}")
    target = ns.target or _default_target(environ)
    targets = (
        {} if ns.target else {n: environ[v] for n in SERVICE_NAMES if environ.get(v := f"MEMPLANE_{n.upper()}_TARGET")}
    )
    ca_path = ns.ca_file or environ.get("MEMPLANE_TLS_CA_FILE")
    try:
        roots = Path(ca_path).read_bytes() if ca_path else None
    except OSError as error:
        raise ConsoleUsageError(f"--ca-file {ca_path}: {error.strerror or error}") from None
    timeout = float(ns.timeout)
    return lambda key: AsyncMemplaneClient(
        target, key, targets=targets, root_certificates=roots, via="console", timeout=timeout
    )


def cluster_access(ns: argparse.Namespace, environ: Mapping[str, str]) -> ClusterAccess:
    """Where the admin view reads MemoryWorkspaces (`memplane.console.cluster.access_from`).
    Raises `ConsoleUsageError` naming --kubeconfig for a file it cannot read: said at start,
    not on the first admin page as an unreachable cluster."""
    from memplane.console.cluster import access_from  # noqa: PLC0415 - beside build_app

    if ns.kubeconfig:
        try:
            Path(ns.kubeconfig).read_bytes()
        except OSError as error:
            raise ConsoleUsageError(f"--kubeconfig {ns.kubeconfig}: {error.strerror or error}") from None
    return access_from(ns.kubeconfig, ns.kube_namespace, environ)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port. Raises `ConsoleUsageError` naming --host / --port."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(128)
    except OSError as error:
        raise ConsoleUsageError(f"--host {host} --port {port}: {error.strerror or error}") from None
    return sock


def server_config(app: ASGIApp, ns: argparse.Namespace) -> uvicorn.Config:
    """uvicorn's settings for the console *app* (an ASGI app). X-Forwarded-For / -Proto
    are read only from the addresses ``--forwarded-allow-ips`` names: without it none is
    trusted, not even 127.0.0.1 (uvicorn's own default, which would let anyone behind a
    `kubectl port-forward` pick the address the sign-in limit counts)."""
    import uvicorn  # noqa: PLC0415 - the console extra

    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
        proxy_headers=bool(ns.forwarded_allow_ips),
        forwarded_allow_ips=ns.forwarded_allow_ips or None,
    )


async def run(ns: argparse.Namespace, usage_error: Callable[[str], NoReturn]) -> int:
    """Serve the console of the parsed flags *ns* until SIGINT/SIGTERM; 0, or 1 with the
    reason on stderr for an address in use. A bad flag goes to *usage_error* (exit 2);
    an unreadable CA file or kubeconfig raises `ConsoleUsageError`."""
    import uvicorn  # noqa: PLC0415 - the console extra, loaded once the flags are read

    from memplane.console.app import build_app  # noqa: PLC0415 - starlette: the console extra
    from memplane.console.cluster import MemoryWorkspaces  # noqa: PLC0415 - beside build_app
    from memplane.console.ratelimit import RateLimiter  # noqa: PLC0415 - beside build_app

    if ns.sign_ins_per_minute < 1:
        usage_error(f"--sign-ins-per-minute: must be 1 or more, not {ns.sign_ins_per_minute}")
    factory = client_factory(ns, os.environ)
    access = cluster_access(ns, os.environ)
    limiter = RateLimiter(burst=ns.sign_ins_per_minute, rate_per_second=ns.sign_ins_per_minute / 60.0)
    try:
        app = build_app(
            factory,
            base_path=ns.base_path,
            secure_cookie=ns.secure_cookie,
            limiter=limiter,
            cluster=MemoryWorkspaces(access),
        )
    except ValueError as error:  # the base path
        usage_error(str(error))
    try:
        sock = _bind(ns.host, ns.port)
    except ConsoleUsageError as error:
        print(f"memplane console: {error}", file=sys.stderr)
        return 1
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    base = ns.base_path.strip("/")
    print(f"memplane console: http://{shown}:{port}/{base + '/' if base else ''}", flush=True)
    await uvicorn.Server(server_config(app, ns)).serve(sockets=[sock])
    return 0


async def serve(argv: Sequence[str], *, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> int:
    """Parse *argv* (`build_parser`) and `run` the console."""
    parser = build_parser(parser_class)
    return await run(parser.parse_args(list(argv)), parser.error)


def main(
    argv: Sequence[str] | None = None, *, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> int:
    """Entry point of `memplane console` (its own event loop)."""
    try:
        return asyncio.run(serve(sys.argv[1:] if argv is None else argv, parser_class=parser_class))
    except ConsoleUsageError as error:
        print(f"memplane console: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
