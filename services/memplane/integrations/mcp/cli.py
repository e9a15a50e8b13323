"""`memplane mcp`: the MCP server's command line. Needs `pip install 'memplane[mcp]'`
only (no server extra, so no memplane settings: it reads its few variables itself).

Where memplane is: ``--target``, else MEMPLANE_TARGET, else MEMPLANE_GRPC__HOST:
MEMPLANE_GRPC__PORT (each defaulting as the server does: 127.0.0.1, 50051). The
workspace: the key of ``--api-key``, else MEMPLANE_API_KEY. TLS: an "https://" target or
``--ca-file`` / MEMPLANE_TLS_CA_FILE, as the other client commands.

The key is checked once at start (one ListMemories of one memory): refused, or memplane
unreachable, and the command exits 1 with the reason on stderr before it serves
anything, so an MCP client shows a server that failed to start rather than tools that
all fail. A key revoked later turns each call into a tool error saying so.

Exit status: 0 when the client hangs up (stdio) or on SIGINT/SIGTERM (http), 1 on a
refused key, an unreachable memplane or an address in use, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from memplane.client.aio import AsyncMemplaneClient
from memplane.errors import MemplaneError, UnauthenticatedError
from memplane.integrations.mcp.server import HTTP_PATH, build_server, serve_http, serve_stdio
from memplane.integrations.mcp.tools import MemoryTools

DEFAULT_HTTP_PORT = 8765


def _default_target(environ: Mapping[str, str]) -> str:
    if environ.get("MEMPLANE_TARGET"):
        return environ["MEMPLANE_TARGET"]
    return f"{environ.get('MEMPLANE_GRPC__HOST') or '127.0.0.1'}:{environ.get('MEMPLANE_GRPC__PORT') or 50051}"


def build_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser of `memplane mcp`, of *parser_class* (the `memplane` script passes its
    one-line-error parser, `memplane.cli.usage.Parser`); its help shows the target the
    environment gives."""
    parser = parser_class(
        prog="memplane mcp",
        description="MCP server (tools search_memories, add_memory, get_memories, delete_memories, list_memories) "
        "over the memplane workspace of the API key.",
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio: one client on stdin/stdout (what a desktop client spawns); "
        f"http: streamable HTTP at http://HOST:PORT{HTTP_PATH} (default stdio)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="http: address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_HTTP_PORT, help=f"http: port (default {DEFAULT_HTTP_PORT}; 0 picks one)"
    )
    parser.add_argument(
        "--stateless",
        action="store_true",
        help="http: no MCP sessions, every request stands alone (several replicas behind one Service need no "
        "sticky sessions)",
    )
    parser.add_argument(
        "--target",
        default=None,
        help=f"memplane server host:port (default {_default_target(os.environ)}: MEMPLANE_TARGET, "
        "else MEMPLANE_GRPC__HOST:MEMPLANE_GRPC__PORT)",
    )
    parser.add_argument("--api-key", default=None, help="the workspace's API key (default MEMPLANE_API_KEY)")
    parser.add_argument(
        "--ca-file",
        default=None,
        help="PEM CA bundle that signed the memplane server's certificate; turns TLS on (env MEMPLANE_TLS_CA_FILE)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per memplane call (default 30)")
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    return parser


async def _serve(ns: argparse.Namespace, target: str, key: str, ca: bytes | None) -> int:
    async with AsyncMemplaneClient(target, key, timeout=ns.timeout, root_certificates=ca) as client:
        try:
            await client.list_memories(page_size=1)
        except UnauthenticatedError as error:
            print(f"memplane mcp: memplane at {target} refused the API key: {error}", file=sys.stderr)
            return 1
        except MemplaneError as error:
            print(f"memplane mcp: cannot use memplane at {target}: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        server = build_server(MemoryTools(client))
        if ns.transport == "stdio":
            await serve_stdio(server)
            return 0
        try:
            await serve_http(server, ns.host, ns.port, stateless=ns.stateless)
        except OSError as error:
            print(f"memplane mcp: cannot listen on {ns.host}:{ns.port}: {error.strerror or error}", file=sys.stderr)
            return 1
        return 0


def main(
    argv: Sequence[str] | None = None, *, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> int:
    """Run `memplane mcp` with *argv* (the words after "mcp"); the exit status. Bad usage
    exits 2 through *parser_class*'s `error` (the `memplane` script passes
    `memplane.cli.usage.Parser`: one line naming the argument, as every other command)."""
    parser = build_parser(parser_class)
    ns = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=ns.log_level.upper(), format="memplane mcp: %(levelname)s %(message)s")
    target = ns.target or _default_target(os.environ)
    key = ns.api_key or os.environ.get("MEMPLANE_API_KEY", "")
    if not key:
        parser.error("no API key: pass --api-key or set MEMPLANE_API_KEY (a workspace key: `memplane key create`)")
    ca_path = ns.ca_file or os.environ.get("MEMPLANE_TLS_CA_FILE")
    try:
        ca = Path(ca_path).read_bytes() if ca_path else None
    except OSError as error:
        print(f"memplane mcp: --ca-file {ca_path}: {error.strerror or error}", file=sys.stderr)
        return 1
    try:
        return asyncio.run(_serve(ns, target, key, ca))
    except KeyboardInterrupt:
        return 130
