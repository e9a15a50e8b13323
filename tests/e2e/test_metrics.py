"""Prometheus metrics of a real `memplane serve` process (OTEL_METRICS_EXPORTER=prometheus,
as the chart sets with metrics.enabled): /metrics counts the RPCs it served."""

from __future__ import annotations

import asyncio
import urllib.request

from memplane.client import AsyncMemplaneClient
from tests.fix_process import Services


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def _list_workspaces_calls(text: str) -> float:
    """Sum of the RPC-duration histogram's counts for ListWorkspaces (any status)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("memplane_rpc_duration_seconds_count") and "ListWorkspaces" in line
    )


async def test_metrics_count_the_rpcs_served(services: Services, admin_key: str) -> None:
    before = _list_workspaces_calls(await asyncio.to_thread(_scrape, services.metrics_port))
    async with AsyncMemplaneClient(services.target, admin_key) as admin:
        for _ in range(3):
            await admin.list_workspaces()
    after = _list_workspaces_calls(await asyncio.to_thread(_scrape, services.metrics_port))
    assert after - before == 3
