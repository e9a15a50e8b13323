"""Idempotency records expire: the sweep deletes a request id's record once it is older
than `retention.idempotency_seconds`, and a retry after that is a new request — stored
again, as documented; a younger record still replays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memplane.domain.models import NewMemory
from memplane.server.app import IDEMPOTENCY_SWEEPER, App
from memplane.server.storage.idempotency import delete_expired_records
from tests.integration.conftest import TenantFactory, principal


async def _records(app: App, workspace_key: int) -> list[str]:
    async with app.db.admin() as conn:
        cur = await conn.execute(
            "SELECT request_id FROM idempotency_keys WHERE workspace_key = %s ORDER BY request_id", (workspace_key,)
        )
        return [r["request_id"] for r in await cur.fetchall()]


async def test_an_expired_request_id_is_swept_and_its_retry_stored_again(
    app: App, tenant_factory: TenantFactory
) -> None:
    # The app's own sweeper runs every minute and could delete our record first (CI saw
    # that once: this pass then deleted 0); held off here so the count below is this pass's.
    sweeper = app.jobs[IDEMPOTENCY_SWEEPER]
    was_running = sweeper.running
    await sweeper.stop()
    try:
        await _sweep_and_retry(app, tenant_factory)
    finally:
        if was_running:
            sweeper.start()


async def _sweep_and_retry(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    old = [NewMemory(content="a note written a day and more ago")]
    young = [NewMemory(content="a note written just now")]
    first = await app.writeback.add(principal(ws), ws, old, "req-old")
    kept = await app.writeback.add(principal(ws), ws, young, "req-young")
    async with app.db.admin() as conn:  # as if req-old had been written 25 hours ago
        await conn.execute(
            "UPDATE idempotency_keys SET created_at = now() - interval '25 hours'"
            " WHERE workspace_key = %s AND request_id = 'req-old'",
            (ws.key,),
        )
    retention = timedelta(seconds=app.settings.retention.idempotency_seconds)
    assert retention == timedelta(hours=24)  # the documented default
    deleted = await delete_expired_records(app.db, before=datetime.now(UTC) - retention, batch_size=1)
    assert deleted >= 1  # other tests' workspaces may hold old records too; ours is among them
    assert await _records(app, ws.key) == ["req-young"]
    again = await app.writeback.add_reply(principal(ws), ws, old, "req-old")
    # A new request (its record is claimed again, below), which finds the text stored:
    # a NOOP duplicate of the first memory (migration 0013), not a second copy.
    assert (again.duplicates, again.memories[0].id) == ((0,), first[0].id)
    replay = await app.writeback.add(principal(ws), ws, young, "req-young")
    assert replay[0].id == kept[0].id  # within retention: the first reply
    assert await _records(app, ws.key) == ["req-old", "req-young"]
