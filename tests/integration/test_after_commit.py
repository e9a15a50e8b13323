"""`after_commit` (memplane.server.storage.commits): a callback registered inside a tenant
or autocommit block runs once that block has committed, never when it rolls back, and at
once outside a block. The vector indexer is told of a deferred write this way, so its pass
never looks before the rows are there (tests/e2e/test_vector_index_late_commit.py)."""

from __future__ import annotations

import pytest

from memplane.domain.models import Workspace
from memplane.server.app import App
from memplane.server.storage.commits import after_commit
from tests.integration.conftest import TenantFactory


async def test_a_callback_runs_after_the_commit_and_not_before(app: App, tenant_factory: TenantFactory) -> None:
    workspace: Workspace = await tenant_factory()
    ran: list[str] = []
    async with app.db.tenant(workspace.key):
        after_commit(lambda: ran.append("tenant"))
        assert ran == []  # the transaction is still open
    assert ran == ["tenant"]
    async with app.db.autocommit(workspace.key):
        after_commit(lambda: ran.append("autocommit"))
        assert ran == ["tenant"]
    assert ran == ["tenant", "autocommit"]


async def test_a_rolled_back_block_drops_its_callbacks(app: App, tenant_factory: TenantFactory) -> None:
    workspace: Workspace = await tenant_factory()
    ran: list[str] = []

    async def refused() -> None:
        async with app.db.tenant(workspace.key):
            after_commit(lambda: ran.append("never"))
            raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        await refused()
    async with app.db.tenant(workspace.key):
        pass  # a later block starts with nothing collected
    assert ran == []


def test_outside_a_block_a_callback_runs_at_once() -> None:
    ran: list[int] = []
    after_commit(lambda: ran.append(1))
    assert ran == [1]
