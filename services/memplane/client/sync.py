"""`MemplaneClient`: a blocking wrapper that runs `AsyncMemplaneClient` on a private
event loop in a background thread (no hand-kept sync twin of every method)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any

from memplane.client.aio import DEFAULT_TARGET, AsyncMemplaneClient


class MemplaneClient:
    """Same methods as `AsyncMemplaneClient`, blocking. Use as a context manager or call
    `close()`."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        api_key: str = "",
        *,
        timeout: float = 60.0,
        targets: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        """*options*: `AsyncMemplaneClient`'s other keyword arguments (retry_reads, tls,
        root_certificates, client_certificate)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memplane-client", daemon=True)
        self._thread.start()
        self._client: AsyncMemplaneClient = self._run(self._make(target, api_key, timeout, targets, options))

    @staticmethod
    async def _make(
        target: str, api_key: str, call_timeout: float, targets: Mapping[str, str] | None, options: dict[str, Any]
    ) -> AsyncMemplaneClient:
        return AsyncMemplaneClient(target, api_key, timeout=call_timeout, targets=targets, **options)

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(method):
            return method  # type: ignore[no-any-return]

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._run(method(*args, **kwargs))

        return call

    def close(self) -> None:
        """Close the channel and stop the loop thread."""
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> MemplaneClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
