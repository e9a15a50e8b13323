"""Adapters that plug memplane into agent frameworks and protocols:
`memplane.integrations.agentscope` (AgentScope 2.x middleware, the `agentscope` extra) and
`memplane.integrations.mcp` (an MCP server, the `mcp` extra). Each is a client of a memplane
server through the client SDK only, never the server extra."""
