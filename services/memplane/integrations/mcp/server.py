"""The MCP server over `MemoryTools`: the SDK's low-level `Server` (the tool schemas are
written out in `schemas`, not derived from signatures), served over stdio or streamable
HTTP (the SDK's Starlette app under uvicorn)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

import memplane
from memplane.integrations.mcp.schemas import TOOLS
from memplane.integrations.mcp.tools import MemoryTools

SERVER_NAME = "memplane"
HTTP_PATH = "/mcp"
INSTRUCTIONS = (
    "Long-term memory of one memplane workspace. Before answering, search_memories for what you know about "
    "the user or task (filter by user_id to stay within one user); add_memory for durable facts, preferences "
    "and lessons worth keeping; delete_memories what the user asks you to forget."
)


def build_server(tools: MemoryTools) -> Server[Any]:
    """An MCP server whose `tools/list` answers `TOOLS` and whose `tools/call` runs *tools*."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return await tools.call(params.name, params.arguments)

    return Server(
        SERVER_NAME,
        version=memplane.__version__,
        title="memplane memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client on this process's stdin/stdout until stdin closes."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class _Uvicorn(uvicorn.Server):
    """uvicorn that calls *on_started* once it accepts connections (lifespan done)."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()


async def serve_http(server: Server[Any], host: str, port: int, *, stateless: bool = False) -> None:
    """Serve streamable HTTP at http://*host*:*port*/mcp (port 0: a free one) until
    SIGINT/SIGTERM, with MCP sessions unless *stateless* (each request on its own). Once
    it accepts connections, print ``memplane mcp: serving streamable HTTP at <url>`` on
    stderr (a line a supervisor or a test can wait for). Raises `OSError` when the
    address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    # The SDK turns DNS-rebinding protection on for a loopback host (Host/Origin checked).
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host, stateless_http=stateless)
    url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}{HTTP_PATH}"
    config = uvicorn.Config(app, log_level="warning", lifespan="on")

    def announce() -> None:
        print(f"memplane mcp: serving streamable HTTP at {url}", file=sys.stderr, flush=True)

    with sock:
        await _Uvicorn(config, announce).serve(sockets=[sock])
