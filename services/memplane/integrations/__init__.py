"""Framework integrations over the client SDK: `memplane.integrations.agentscope` (needs
the `agentscope` extra). They import only `memplane.client`, never the server."""
