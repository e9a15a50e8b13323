"""`memplane mcp`: an MCP server (the official `mcp` SDK, stdio or streamable HTTP) whose
tools search, add, get, delete and list the memories of the workspace its API key
names. A client of a memplane server through `memplane.client` only: `pip install
'memplane[mcp]'`, no server extra."""

from memplane.integrations.mcp.server import build_server
from memplane.integrations.mcp.tools import TOOLS, MemoryTools

__all__ = ["TOOLS", "MemoryTools", "build_server"]
