"""`Memory`: mem0's blocking class, running its `AsyncMemory` on a private event loop in a
background thread (no hand-kept sync twin: every method is the async one's, awaited
there). The Platform's blocking `MemoryClient` is `Memory` over an `AsyncMemoryClient`
(`memplane.compat.mem0.platform`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any

from memplane.compat.mem0.memory import AsyncMemory


class Memory:
    """mem0's `Memory`, blocking: `Memory()` (MEMPLANE_TARGET, MEMPLANE_API_KEY),
    `Memory.from_config({"target": ..., "api_key": ...})`. Methods, arguments, results and
    errors are `AsyncMemory`'s; close() (or `with`) stops the loop thread."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memplane-mem0", daemon=True)
        self._thread.start()
        try:
            self._memory: AsyncMemory = self._run(self._make(config))
        except BaseException:
            self._stop()
            raise

    async def _make(self, config: Mapping[str, Any] | None) -> AsyncMemory:
        # Built on the loop thread: grpc.aio channels belong to the loop they are made on.
        return AsyncMemory(config)

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> Memory:
        """As mem0's `from_config`: see `memplane.compat.mem0.config.client_from_config`."""
        return cls(config_dict)

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        """`AsyncMemory.add`, blocking."""
        return self._run(self._memory.add(messages, **kwargs))  # type: ignore[no-any-return]

    def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        """`AsyncMemory.search`, blocking."""
        return self._run(self._memory.search(query, **kwargs))  # type: ignore[no-any-return]

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """`AsyncMemory.get`, blocking."""
        return self._run(self._memory.get(memory_id))  # type: ignore[no-any-return]

    def get_all(self, **kwargs: Any) -> dict[str, Any]:
        """`AsyncMemory.get_all`, blocking."""
        return self._run(self._memory.get_all(**kwargs))  # type: ignore[no-any-return]

    def update(self, memory_id: str, text: str | None = None, **kwargs: Any) -> dict[str, str]:
        """`AsyncMemory.update`, blocking."""
        return self._run(self._memory.update(memory_id, text, **kwargs))  # type: ignore[no-any-return]

    def delete(self, memory_id: str, **kwargs: Any) -> dict[str, str]:
        """`AsyncMemory.delete`, blocking (`MemoryClient`'s takes delete_linked=)."""
        return self._run(self._memory.delete(memory_id, **kwargs))  # type: ignore[no-any-return]

    def delete_all(self, **kwargs: Any) -> dict[str, str]:
        """`AsyncMemory.delete_all`, blocking."""
        return self._run(self._memory.delete_all(**kwargs))  # type: ignore[no-any-return]

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """`AsyncMemory.history`, blocking."""
        return self._run(self._memory.history(memory_id))  # type: ignore[no-any-return]

    def reset(self, **kwargs: Any) -> Any:
        """`AsyncMemory.reset`, blocking (refused without a scope)."""
        return self._run(self._memory.reset(**kwargs))

    def close(self) -> None:
        """Close the channels and stop the loop thread."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._memory.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
