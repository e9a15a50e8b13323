"""mem0's hosted-Platform clients over memplane: `AsyncMemoryClient` (mem0's
`AsyncMemoryClient(api_key=..., host=...)`) and its blocking twin `MemoryClient`. The
methods are `AsyncMemory`'s; what the Platform adds (its page shape, arguments memplane
accepts and ignores, a 404 on `get`) is here."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from memplane.client.aio import AsyncMemplaneClient
from memplane.compat.mem0 import shapes
from memplane.compat.mem0.errors import as_mem0
from memplane.compat.mem0.memory import AsyncMemory
from memplane.compat.mem0.sync import Memory

_log = logging.getLogger("memplane.compat.mem0")


def ignored(method: str, **given: Any) -> None:
    """Warn, naming them, of the Platform arguments *method* accepts and does not use."""
    named = sorted(name for name, value in given.items() if value is not None)
    if named:
        _log.warning("%s(): %s accepted and ignored: memplane has no counterpart", method, ", ".join(named))


class AsyncMemoryClient(AsyncMemory):
    """mem0's hosted-Platform `AsyncMemoryClient(api_key=..., host=...)` over memplane:
    *api_key* is a memplane workspace key (default MEMPLANE_API_KEY, else MEM0_API_KEY, so
    mem0 code that sets that variable needs no change), *host* the server's
    "host:port" or "https://host[:port]" (default MEMPLANE_TARGET). Raises `ValueError`
    without a key, as mem0 does. Same methods as `AsyncMemory`, except that `get` raises
    `MemoryNotFoundError` for an unknown id (the Platform answers 404), `get_all` answers
    the Platform's page shape ({"count", "next", "previous", "results"}) and `reset`
    returns mem0's message dict. *org_id* / *project_id* are accepted and unused: the
    workspace comes from the key; so are the Platform's `app_id=`, `options=`, `page=`
    and `delete_linked=` (a warning names them)."""

    def __init__(
        self,
        api_key: str | None = None,
        host: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
        *,
        client: AsyncMemplaneClient | None = None,
        timeout: float = 60.0,
    ) -> None:
        del org_id, project_id
        if client is None:
            key = api_key or os.environ.get("MEMPLANE_API_KEY") or os.environ.get("MEM0_API_KEY")
            if not key:
                raise ValueError("memplane API key not provided: pass api_key= or set MEMPLANE_API_KEY.")
            config: dict[str, Any] = {"api_key": key, "timeout": timeout}
            if host:
                config["target"] = host
            super().__init__(config)
        else:
            super().__init__(client=client)

    async def add(self, messages: Any, *, app_id: Any = None, options: Any = None, **kwargs: Any) -> dict[str, Any]:
        """`AsyncMemory.add`; the Platform's *app_id* and *options* are accepted and
        unused (a warning names them)."""
        ignored("add", app_id=app_id, options=options)
        return await super().add(messages, **kwargs)

    async def search(self, query: str, *, app_id: Any = None, options: Any = None, **kwargs: Any) -> dict[str, Any]:
        """`AsyncMemory.search`; *app_id* and *options* accepted and unused (warned)."""
        ignored("search", app_id=app_id, options=options)
        return await super().search(query, **kwargs)

    async def get_all(
        self,
        *,
        app_id: Any = None,
        options: Any = None,
        page: int | None = None,
        page_size: int | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """`AsyncMemory.get_all` in the Platform's paginated shape: {"count": the number
        of results, "next": None, "previous": None, "results": [...]} (one page of at most
        *page_size*, else *top_k*, memories). *page* other than 1, *app_id* and *options*
        are accepted and unused (warned): memplane pages by token, not by number."""
        ignored("get_all", app_id=app_id, options=options, page=None if page in (None, 1) else page)
        if page_size is not None and kwargs.get("top_k") is None:
            kwargs["top_k"] = page_size
        results = (await super().get_all(**kwargs))["results"]
        return {"count": len(results), "next": None, "previous": None, "results": results}

    async def update(  # type: ignore[override]
        self, memory_id: str, text: str | None = None, *, options: Any = None, **kwargs: Any
    ) -> dict[str, str]:
        """`AsyncMemory.update`; *options* accepted and unused (warned)."""
        ignored("update", options=options)
        return await super().update(memory_id, text, **kwargs)

    async def delete(self, memory_id: str, delete_linked: bool = False) -> dict[str, str]:
        """`AsyncMemory.delete`; *delete_linked* (the Platform's "also the memories this
        one superseded") is accepted and unused (warned): memplane keeps a superseded
        version in the memory's own history, not as a linked memory."""
        ignored("delete", delete_linked=delete_linked or None)
        return await super().delete(memory_id)

    async def get(self, memory_id: str) -> dict[str, Any]:
        """One memory as an item; raises `MemoryNotFoundError` for an unknown id."""
        with as_mem0():
            return shapes.memory_item(await self._client.get_memory(memory_id))

    async def reset(  # type: ignore[override]
        self, *, user_id: Any = None, agent_id: Any = None, run_id: Any = None
    ) -> dict[str, str]:
        """As `AsyncMemory.reset`; returns {"message": "Client reset successful. ..."}."""
        await super().reset(user_id=user_id, agent_id=agent_id, run_id=run_id)
        return {"message": "Client reset successful. All users and memories deleted."}


class MemoryClient(Memory):
    """mem0's Platform `MemoryClient(api_key=..., host=...)`, blocking: see
    `AsyncMemoryClient` (api_key: a memplane workspace key, default MEMPLANE_API_KEY;
    host: "host:port" or "https://...", default MEMPLANE_TARGET)."""

    def __init__(
        self,
        api_key: str | None = None,
        host: str | None = None,
        org_id: str | None = None,
        project_id: str | None = None,
    ) -> None:
        self._args = (api_key, host, org_id, project_id)
        super().__init__()

    async def _make(self, config: Mapping[str, Any] | None) -> AsyncMemory:
        return AsyncMemoryClient(*self._args)
