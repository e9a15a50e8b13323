"""The retention sweep against the real database: every workspace's expired memories
erased in batches, stats kept exact, nothing else touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memplane.domain.models import EventKind, NewMemory
from memplane.server.app import App
from memplane.server.storage.retention import RETENTION_ACTOR, delete_expired_memories
from tests.integration.conftest import TenantFactory, principal
from tests.support import unit_vectors


async def test_sweep_erases_expired_memories_of_every_workspace_in_batches(
    app: App, tenant_factory: TenantFactory
) -> None:
    now = datetime.now(UTC)
    a, b = await tenant_factory(), await tenant_factory()
    vectors = unit_vectors(6, seed=601)

    def item(i: int, expires: datetime | None) -> NewMemory:
        return NewMemory(content=f"memory {i}", expires_at=expires, embedding=tuple(float(x) for x in vectors[i]))

    past, future = now - timedelta(hours=1), now + timedelta(hours=1)
    in_a = await app.writeback.add(principal(a), a, [item(0, past), item(1, past), item(2, future)])
    in_b = await app.writeback.add(principal(b), b, [item(3, past), item(4, None)])
    # Other sweeps (the session server's own) may erase some first: count what is left.
    deleted = await delete_expired_memories(app.db, now=now + timedelta(minutes=1), batch_size=1)
    assert deleted <= 3
    for ws, kept in ((a, [in_a[2]]), (b, [in_b[1]])):
        usage = await app.admin.usage(ws.name)
        assert usage.memory_count == len(kept)
        assert usage.content_bytes == sum(len(m.content.encode()) for m in kept)
    for gone in (in_a[0], in_a[1], in_b[0]):
        ws = a if gone in in_a else b
        events = await app.writeback.history(ws, gone.id)
        assert [(e.kind, e.actor) for e in events] == [
            (EventKind.ADD, "key:integration"),
            (EventKind.DELETE, RETENTION_ACTOR),
        ]
        assert all(e.before is None and e.after is None for e in events)
    assert await delete_expired_memories(app.db, now=now + timedelta(minutes=1)) == 0
    with pytest.raises(ValueError, match="batch_size"):
        await delete_expired_memories(app.db, now=now, batch_size=0)
