"""What every SandboxClass adapter shares: its errors and how it reads its backend's
(`ErrorTable`), the workspace a backend is opened for (`Target`), the open backend it
returns, what starting a sandbox gave (`Started`, `start_by_ensure`) and the shape of an
adapter module (`Adapter`). See `memplane_operator.backends`."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from memplane.errors import FailedPreconditionError
from memplane.sandbox import SandboxBackend, SandboxHandle
from memplane_operator.kube import Kube

CLASS_LABEL = "memplane.io/sandbox-class"  # on what a class's backend makes: the class's name
_IMAGE = re.compile(r"^[^\s]{1,1024}$")


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


@dataclass(frozen=True)
class Reading:
    """One row of an `ErrorTable`: an error of *kinds* is read as *verdict*
    (`BackendRefusedError` or `BackendUnavailableError`), its message *prefix* then the
    error's own text."""

    kinds: type[BaseException] | tuple[type[BaseException], ...]
    verdict: type[BackendRefusedError] | type[BackendUnavailableError]
    prefix: str = ""


@dataclass(frozen=True)
class ErrorTable:
    """How an adapter reads its backend's errors (`Adapter.classify`), tried in order:

    1. each of *first* (what only this backend has: a rejected key, a Pod not ready);
    2. `FailedPreconditionError` (what the `memplane.sandbox` backend raises when its
       service refuses what the class asks: an image, an object) -> refused, its text;
    3. an *api_error* (the client's error for an HTTP answer), by the status *status_of*
       gives it: 4xx -> refused, "<service> refused (<status>): <detail>"; a 5xx or no
       status (no answer) -> unavailable, "<service> failed [(<status>)]: <detail>";
    4. a *transport* error (no connection, reset) -> unavailable,
       "<service> is unreachable: <error>";
    5. anything else -> None (not the backend's).

    *service* names the backend in every message ("the Docker engine", "E2B"); the
    operation is named by the caller (`Backends.call`)."""

    service: str
    api_error: type[BaseException] | tuple[type[BaseException], ...]
    status_of: Callable[[Any], int | None]
    detail_of: Callable[[Any], str] = str
    transport: tuple[type[BaseException], ...] = (OSError,)
    first: tuple[Reading, ...] = ()

    def classify(self, error: BaseException) -> Exception | None:
        """*error* as `BackendRefusedError` / `BackendUnavailableError` (see the class), or
        None if it is not the backend's."""
        for row in self.first:
            if isinstance(error, row.kinds):
                return row.verdict(f"{row.prefix}{error}")
        if isinstance(error, FailedPreconditionError):
            return BackendRefusedError(str(error))
        if isinstance(error, self.api_error):
            status, detail = self.status_of(error), self.detail_of(error)
            if status is not None and 400 <= status < 500:
                return BackendRefusedError(f"{self.service} refused ({status}): {detail}")
            code = f" ({status})" if status is not None else ""
            return BackendUnavailableError(f"{self.service} failed{code}: {detail}")
        if isinstance(error, self.transport):
            return BackendUnavailableError(f"{self.service} is unreachable: {error}")
        return None


@dataclass(frozen=True)
class Target:
    """The MemoryWorkspace a backend is opened for: its *namespace* (where a pod
    sandbox's objects go), *owner* (an ownerReference to it), *storage* (its
    spec.sandbox.storageSize); the operator's *kube* client and *own_namespace* (where
    the Secrets a SandboxClass names live)."""

    namespace: str
    owner: Mapping[str, Any]
    storage: str
    kube: Kube
    own_namespace: str


@dataclass
class OpenBackend:
    """A backend ready for lifecycle calls and how to release what it holds."""

    backend: SandboxBackend
    close: Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Started:
    """What `Adapter.start` gave: the sandbox's *handle*, and, while it is not ready to
    use yet, *waiting* (what it waits on) with a condition *reason*; "" once ready."""

    handle: SandboxHandle
    waiting: str = ""
    reason: str = ""


def check_image(field: str, image: str) -> str:
    """*image* if it can be an image reference (1-1,024 characters, no whitespace; the
    engine or the kubelet judges the rest); `InvalidParametersError` naming *field* else."""
    if not _IMAGE.match(image):
        raise InvalidParametersError(field, f"{image!r} is not an image reference")
    return image


async def start_by_ensure(backend: SandboxBackend, workspace: str) -> Started:
    """`Adapter.start` of a backend whose `ensure` returns once the sandbox is ready to
    use (docker: the container made or started; e2b: the sandbox found and connected, a
    paused one resumed, or created): the handle, nothing waited on."""
    return Started(await backend.ensure(workspace))


async def nothing_to_close() -> None:
    """`OpenBackend.close` of a backend that holds nothing of its own."""


class Adapter(Protocol):
    """What an adapter module provides (see `memplane_operator.backends.docker`, `.pod`, `.e2b`)."""

    TYPE: str
    SHARED: bool  # one open backend serves every workspace of the class (else one per call)

    def parse(self, class_name: str, spec: Mapping[str, Any]) -> Any:
        """The parameters of SandboxClass *class_name* from its spec; raises `InvalidParametersError`."""

    async def open_backend(self, params: Any, target: Target) -> OpenBackend:
        """A backend for *params* (a shared one ignores *target*); raises
        `InvalidParametersError` for a parameter only checkable now (a Secret it names)."""

    async def start(self, backend: Any, workspace: str) -> Started:
        """Make or resume *workspace*'s sandbox (the lifecycle `ensure`, without blocking
        on a sandbox that becomes ready by itself later)."""

    async def ref_by_name(self, backend: Any, params: Any, workspace: str) -> str | None:
        """The reference of *workspace*'s sandbox found without a recorded one (by name or
        metadata), for a release after a crash between the backend's create and the status
        write; None when there is none."""

    def classify(self, error: BaseException) -> Exception | None:
        """*error* as `BackendUnavailableError` / `BackendRefusedError`, or None if it is not the backend's."""
