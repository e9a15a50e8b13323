"""A mem0-style config to a memplane client: `AsyncMemory(config)` and
`AsyncMemory.from_config(config)` take {"target", "api_key", "timeout"}, and ignore the
keys of mem0's own stack (memplane's server owns the store and the models)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from memplane.client.aio import AsyncMemplaneClient

_log = logging.getLogger("memplane.compat.mem0")

# mem0 configuration that memplane's server owns (its own embedder, store, history and,
# once configured, LLM): accepted in a config so mem0 code keeps working, and ignored.
SERVER_OWNED_CONFIG = frozenset(
    {"vector_store", "llm", "embedder", "graph_store", "reranker", "history_db_path", "version", "custom_instructions"}
)


def client_from_config(config: Mapping[str, Any] | None) -> Callable[[], AsyncMemplaneClient]:
    """What makes the memplane client of a mem0-style config: {"target": "host:port",
    "api_key": "mp_...", "timeout": seconds}; missing keys come from MEMPLANE_TARGET /
    MEMPLANE_API_KEY (and TLS from MEMPLANE_TLS_CA_FILE). mem0's own keys (vector_store,
    llm, embedder, ...) are ignored with a warning. Raises `ValueError` at once for an
    unknown key or when no target or key is given either way; the client itself is made
    by calling the result, on the event loop that will use it (a grpc.aio channel made
    outside it, e.g. at import time before `asyncio.run`, fails on first use)."""
    given = dict(config or {})
    ignored = sorted(SERVER_OWNED_CONFIG & set(given))
    if ignored:
        _log.warning("mem0 config %s ignored: memplane's server owns the store and models", ", ".join(ignored))
    unknown = sorted(set(given) - SERVER_OWNED_CONFIG - {"target", "api_key", "timeout"})
    if unknown:
        raise ValueError(f"unknown config keys {unknown}: memplane takes target, api_key, timeout")
    env = dict(os.environ)
    if given.get("target"):
        env["MEMPLANE_TARGET"] = str(given["target"])
    if given.get("api_key"):
        env["MEMPLANE_API_KEY"] = str(given["api_key"])
    missing = [name for name in ("MEMPLANE_TARGET", "MEMPLANE_API_KEY") if not env.get(name)]
    if missing:
        raise ValueError(f"set {' and '.join(missing)} (or give target / api_key in the config)")
    timeout = float(given.get("timeout", 60.0))
    return lambda: AsyncMemplaneClient.from_env(env, timeout=timeout)
