"""memplane: a multi-tenant long-term memory platform for LLM agents.

The public surface is small on purpose, and is what `pip install memplane` (the bare
client) installs:

- `memplane.client`: the client SDK (`AsyncMemplaneClient`, its sync wrapper
  `MemplaneClient`, `generate_api_key`);
- `memplane.compat`: other memory libraries' APIs over the client (`memplane.compat.mem0`);
- `memplane.integrations`: adapters for agent frameworks and protocols
  (`memplane.integrations.agentscope`, `memplane.integrations.mcp`, each with its extra);
- `memplane.errors`: the one error hierarchy under `MemplaneError`, which the client
  raises.

Everything else (the server, its settings, storage and services: the `server` extra) is
internal, not an API. tests/unit/test_public_names.py pins these names.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "client", "compat", "errors", "integrations"]
