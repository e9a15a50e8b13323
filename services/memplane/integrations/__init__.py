"""Adapters that plug memplane into agent frameworks and protocols (`memplane.integrations.mcp`:
an MCP server). Each is a client of a memplane server through the client SDK only and
needs its own extra (`pip install 'memplane[mcp]'`), never the server extra."""
