"""The SandboxClass types the operator drives through `memplane.sandbox` backends: one
adapter module per type (`docker`, `pod`, `e2b`, beside `base`, the shape they share),
looked up in `ADAPTERS` (plain imports, no strings).

An adapter (`Adapter`) turns a SandboxClass spec into parameters (`parse`, raising
`InvalidParametersError` naming the field), opens a backend from them for a workspace
(`open_backend`), starts a workspace's sandbox (`start`: ready, or what it waits on) and
says what an exception of its backend means (`classify`): the backend is out of reach or
failing (`BackendUnavailableError`, retried soon with backoff), or it refuses what the
class asks (`BackendRefusedError`, e.g. an image the engine does not have: retried at the
resync, fixed by an edit). `local` and `none` are not here: the operator provisions those
itself (a PersistentVolumeClaim; nothing).

`Backends` keeps one open backend per SandboxClass and parameters for the adapters whose
backend serves every workspace (`SHARED`: docker, one client per class; a changed class
opens a new one) and opens the others for each use (pod: per namespace and owner; e2b:
its key read from the Secret each time); each lifecycle call is bounded by a timeout;
what is open is closed at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memplane.sandbox import SandboxBackend
from memplane_operator.backends import docker, e2b, pod
from memplane_operator.backends.base import (
    Adapter,
    BackendRefusedError,
    BackendUnavailableError,
    InvalidParametersError,
    OpenBackend,
    Started,
    Target,
)

__all__ = [
    "ADAPTERS",
    "Adapter",
    "BackendRefusedError",
    "BackendUnavailableError",
    "Backends",
    "InvalidParametersError",
    "OpenBackend",
    "Started",
    "Target",
    "adapter_for",
    "parse",
]

T = TypeVar("T")

DEFAULT_CALL_TIMEOUT_SECONDS = 60.0  # one ensure / suspend / destroy, API round trips included


ADAPTERS: Mapping[str, Adapter] = {  # a module is an Adapter by its functions
    docker.TYPE: docker,
    pod.TYPE: pod,
    e2b.TYPE: e2b,
}


def adapter_for(kind: str) -> Adapter | None:
    """The adapter of SandboxClass type *kind*, or None when the operator has none."""
    return ADAPTERS.get(kind)


def parse(kind: str, class_name: str, spec: Mapping[str, Any]) -> Any:
    """The parameters of SandboxClass *class_name* (its *spec*, of type *kind*, which has
    an adapter). Raises `InvalidParametersError` naming the field."""
    return ADAPTERS[kind].parse(class_name, spec)


@dataclass
class Backends:
    """Open backends keyed by (class name, parameters), shared by every reconcile of the
    process. *call_timeout_seconds* bounds each lifecycle call."""

    call_timeout_seconds: float = DEFAULT_CALL_TIMEOUT_SECONDS
    _open: dict[tuple[str, str], OpenBackend] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @contextlib.asynccontextmanager
    async def use(self, class_name: str, kind: str, params: Any, target: Target) -> AsyncIterator[SandboxBackend]:
        """The backend of SandboxClass *class_name* with *params* for *target*'s workspace:
        a shared one kept open (one opened with other parameters for the same class is
        closed first), else one opened now and closed on leaving. Raises
        `InvalidParametersError` from the adapter's `open_backend`."""
        adapter = ADAPTERS[kind]
        if not adapter.SHARED:
            opened = await adapter.open_backend(params, target)
            try:
                yield opened.backend
            finally:
                await opened.close()
            return
        key = (class_name, json.dumps(_plain(params), sort_keys=True))
        async with self._lock:
            found = self._open.get(key)
            if found is None:
                for stale in [k for k in self._open if k[0] == class_name]:
                    await self._open.pop(stale).close()
                found = await adapter.open_backend(params, target)
                self._open[key] = found
        yield found.backend

    async def call(self, kind: str, what: str, operation: Awaitable[T]) -> T:
        """Await a lifecycle *operation* of a *kind* backend within the call timeout. Raises
        `BackendUnavailableError` (timeout, unreachable, failing) or `BackendRefusedError`,
        naming *what* was attempted; other errors propagate."""
        try:
            async with asyncio.timeout(self.call_timeout_seconds):
                return await operation
        except TimeoutError as error:
            raise BackendUnavailableError(f"{what}: no answer within {self.call_timeout_seconds:g} s") from error
        except Exception as error:
            mapped = ADAPTERS[kind].classify(error)
            if mapped is None:
                raise
            raise type(mapped)(f"{what}: {mapped}") from error

    async def close(self) -> None:
        """Close every open backend (at operator exit)."""
        async with self._lock:
            while self._open:
                await self._open.popitem()[1].close()


def _plain(params: Any) -> Any:
    """*params* as JSON-able data (a dataclass becomes its fields)."""
    fields = getattr(params, "__dataclass_fields__", None)
    return {name: getattr(params, name) for name in fields} if fields is not None else params
