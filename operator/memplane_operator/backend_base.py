"""What every SandboxClass adapter shares: its errors, the open backend it returns, and
the shape of an adapter module (`Adapter`). See `memplane_operator.backends`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from memplane.sandbox import SandboxBackend


class InvalidParametersError(ValueError):
    """A SandboxClass parameter the schema let through but the backend cannot use;
    *field* is its path (``spec.docker.host``)."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"{field}: {why}")


class BackendUnavailableError(Exception):
    """The backend cannot be reached or failed on its side (connection refused, a 5xx, a
    call past its timeout): retried with backoff."""


class BackendRefusedError(Exception):
    """The backend answered and refused the request (a missing image, a bad parameter it
    alone can judge): only a change to the SandboxClass or the backend helps."""


@dataclass
class OpenBackend:
    """A backend ready for lifecycle calls and how to release what it holds."""

    backend: SandboxBackend
    close: Callable[[], Awaitable[None]]


class Adapter(Protocol):
    """What an adapter module provides (see backend_docker)."""

    TYPE: str

    def parse(self, class_name: str, spec: Mapping[str, Any]) -> Any:
        """The parameters of SandboxClass *class_name* from its spec; raises `InvalidParametersError`."""

    async def open_backend(self, params: Any) -> OpenBackend:
        """A backend for *params* (no network call needed to open it)."""

    def ref_by_name(self, params: Any, workspace: str) -> str:
        """A reference that finds *workspace*'s sandbox without a recorded one (a name), for a
        release after a crash between the backend's create and the status write."""

    def classify(self, error: BaseException) -> Exception | None:
        """*error* as `BackendUnavailableError` / `BackendRefusedError`, or None if it is not the backend's."""
