"""The sandbox backends under the contract suite: one factory each. A new backend (docker
over Podman, pod, e2b over a fake envd) joins the suite by adding its factory to
`BACKENDS`; the factory yields a ready backend and cleans up what it started."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from memplane.sandbox import LocalSandboxes, SandboxBackend

BackendFactory = Callable[[Path], AbstractAsyncContextManager[SandboxBackend]]


class ExecDerivedLocal(LocalSandboxes):
    """The local backend with symlink resolution, listing and deleting left to the base
    class's defaults derived from `_exec` (`realpath -m`, `find -printf`, `rm -rf`):
    what a remote backend (docker, pod, e2b) inherits, run here against the host's
    GNU tools."""

    _realpath = SandboxBackend._realpath
    _list = SandboxBackend._list
    _delete = SandboxBackend._delete


@asynccontextmanager
async def _local(tmp: Path) -> AsyncIterator[SandboxBackend]:
    yield LocalSandboxes(tmp / "sandboxes")


@asynccontextmanager
async def _exec_derived(tmp: Path) -> AsyncIterator[SandboxBackend]:
    yield ExecDerivedLocal(tmp / "sandboxes")


BACKENDS: dict[str, BackendFactory] = {"local": _local, "exec-derived": _exec_derived}


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SandboxBackend]:
    """Each backend of `BACKENDS` in turn."""
    async with BACKENDS[request.param](tmp_path) as ready:
        yield ready


@pytest.fixture
def workspace() -> str:
    """A fresh workspace name."""
    return f"ws-{uuid.uuid4().hex[:12]}"
