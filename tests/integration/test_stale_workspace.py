"""A caller whose workspace was deleted after its key was verified — a key cached by a
process that the deletion's notification has not reached yet — gets UNAUTHENTICATED from
every kind of tenant transaction (a pipelined write, a pipelined read, a plain one), also
once a workspace of the same name exists again; never INTERNAL (a missing stats row, no
partition for the row), and the database is not taken for down.

Deterministic where the two-process test (tests/faults/test_revocation.py) cannot be: here
the stale `Workspace` is held on purpose. On the code before
`memplane_enter_workspace()` the write failed with INTERNAL."""

from __future__ import annotations

import uuid

import pytest

from memplane.domain.models import NewMemory, Workspace
from memplane.errors import UnauthenticatedError
from memplane.server.app import App
from tests.integration.conftest import TenantFactory, principal
from tests.support import unit_vectors


async def _refused_everywhere(app: App, stale: Workspace) -> None:
    memory = NewMemory(content="written after the deletion", embedding=tuple(unit_vectors(1)[0]))
    with pytest.raises(UnauthenticatedError):
        await app.writeback.add(principal(stale), stale, [memory])
    with pytest.raises(UnauthenticatedError):
        await app.retrieval.get(stale, str(uuid.uuid4()))
    with pytest.raises(UnauthenticatedError):
        async with app.db.tenant(stale.key) as conn:
            await conn.execute("SELECT 1")
    assert app.db.availability.up


async def test_a_deleted_workspace_is_unauthenticated_in_every_tenant_transaction(
    app: App, tenant_factory: TenantFactory
) -> None:
    stale = await tenant_factory()
    await app.admin.delete_workspace(stale.name)
    await _refused_everywhere(app, stale)
    reborn = await app.admin.create_workspace(stale.name)
    try:
        await _refused_everywhere(app, stale)
        [stored] = await app.writeback.add(principal(reborn), reborn, [NewMemory(content="the new tenant's own")])
        assert (await app.retrieval.get(reborn, stored.id)).content == "the new tenant's own"
    finally:
        await app.admin.delete_workspace(reborn.name)
