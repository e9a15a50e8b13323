"""Integration fixtures: workspaces created through the services directly (no gRPC)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from memplane.domain.models import Principal, Workspace
from memplane.errors import NotFoundError
from memplane.server.app import App
from tests.fix_server import random_workspace_name

TenantFactory = Callable[[], Awaitable[Workspace]]


@pytest.fixture
async def tenant_factory(app: App) -> AsyncIterator[TenantFactory]:
    """`await make()` creates a fresh workspace (domain object); all are deleted after."""
    made: list[Workspace] = []

    async def make() -> Workspace:
        ws = await app.admin.create_workspace(random_workspace_name())
        made.append(ws)
        return ws

    yield make
    for ws in made:
        with contextlib.suppress(NotFoundError):  # the test deleted it itself
            await app.admin.delete_workspace(ws.name)


def principal(workspace: Workspace) -> Principal:
    """A caller of *workspace* (as the gRPC edge derives it from a key)."""
    return Principal(actor="key:integration", workspace=workspace)
