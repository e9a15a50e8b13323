"""The usage view's backend for a workspace key: memories added and searches per UTC day
over the last days, counted by the server (GetDailyUsage: memories still stored by their
creation day, superseded and expired included, deleted ones gone; searches as the
retrieval service counts them, docs/guides/console.md, "Usage"), and the workspace's total.

    GET api/usage/daily?days=14 -> {days: [{date, memories_added, searches}], total}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memplane.console import inputs
from memplane.console.sessions import Session
from memplane.v1 import filter_pb2

MAX_DAYS = 60


async def daily(request: Request, session: Session) -> Response:
    """Memories added and searches on each of the last *days* (1-60, default 14) UTC days,
    oldest first, today included (so far), and the workspace's total of stored memories:
    two calls (GetDailyUsage, ListMemories with page_size 1). A bad *days* is a 400 naming
    it; a workspace's rate quota refusing a call is a 429 (`errors.from_memplane`)."""
    days = inputs.integer(request.query_params, "days", default=14, low=1, high=MAX_DAYS)
    usage = await session.client.get_daily_usage(days)
    total = (
        await session.client.list_memories(
            filter=filter_pb2.MemoryFilter(include_superseded=True, include_expired=True), page_size=1
        )
    ).total_size
    return JSONResponse(
        {
            "days": [
                {
                    "date": d.start_time.ToDatetime().date().isoformat(),
                    "memories_added": d.memories_added,
                    "searches": d.search_count,
                }
                for d in usage.days
            ],
            "total": total,
        }
    )
