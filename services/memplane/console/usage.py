"""The usage view's backend for a workspace key: memories added per day over the last
days, counted by the server (ListMemories' total_size over each day's creation range,
superseded and expired included; deleted memories are gone and not counted).

    GET api/usage/daily?days=14 -> {days: [{date, memories_added}], total}
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from google.protobuf import timestamp_pb2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memplane.client import AsyncMemplaneClient
from memplane.console import inputs
from memplane.console.sessions import Session
from memplane.v1 import filter_pb2

MAX_DAYS = 60
CONCURRENT_CALLS = 2  # a workspace's requests-per-second quota sees at most this many at once


def _ts(when: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(when)
    return ts


async def _count(client: AsyncMemplaneClient, start: datetime, end: datetime) -> int:
    flt = filter_pb2.MemoryFilter(
        create_time_start=_ts(start), create_time_end=_ts(end), include_superseded=True, include_expired=True
    )
    return (await client.list_memories(filter=flt, page_size=1)).total_size


async def daily(request: Request, session: Session) -> Response:
    """Memories added on each of the last *days* (1-60, default 14) UTC days, oldest
    first, today included (so far), and the workspace's total: *days* + 1 ListMemories
    calls, `CONCURRENT_CALLS` at a time. A workspace's rate quota refusing one is a 429
    (`errors.from_memplane`)."""
    days = inputs.integer(request.query_params, "days", default=14, low=1, high=MAX_DAYS)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    starts = [today - timedelta(days=n) for n in range(days - 1, -1, -1)]
    gate = asyncio.Semaphore(CONCURRENT_CALLS)

    async def count(start: datetime) -> int:
        async with gate:
            return await _count(session.client, start, start + timedelta(days=1))

    counts = await asyncio.gather(*(count(s) for s in starts))
    total = (
        await session.client.list_memories(
            filter=filter_pb2.MemoryFilter(include_superseded=True, include_expired=True), page_size=1
        )
    ).total_size
    return JSONResponse(
        {
            "days": [{"date": s.date().isoformat(), "memories_added": c} for s, c in zip(starts, counts, strict=True)],
            "total": total,
        }
    )
