"""memplane: a multi-tenant long-term memory platform for LLM agents.

The public surface is small on purpose: the client SDK (`memplane.client`), the error
hierarchy (`memplane.errors`) and the settings (`memplane.settings`). Everything else is
the server's internals.
"""

__version__ = "0.1.0"
