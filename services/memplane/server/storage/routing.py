"""The seam between the services and the clusters: the services open tenant transactions
by workspace, as on one `Database`, and `RoutedDatabase` / `RoutedReads` run each on the
cluster the workspace is placed on (`memplane.server.storage.placement`).

A cluster that is down fails only the transactions routed to it: each cluster's pool has
its own `Availability`, which answers UNAVAILABLE within RECOVERY_WAIT_SECONDS once a
connection-level error was seen, while the other clusters' pools serve on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, TypeVar

from memplane.errors import UnavailableError
from memplane.server.storage.database import Connection, Database
from memplane.server.storage.placement import Placement

T = TypeVar("T")


class TenantDatabase(Protocol):
    """Tenant transactions by workspace: a `Database` (one cluster) or a `RoutedDatabase`
    (the workspace's cluster). See `Database.tenant`, `Database.tenant_pipeline` and
    `Database.autocommit` for what each does and raises."""

    def tenant(
        self,
        workspace_key: int,
        *,
        pipeline: bool = False,
        after_lsn: str = "",
        wait_seconds: float = 0.0,
        lock_timeout_ms: int = 0,
    ) -> AbstractAsyncContextManager[Connection]: ...

    def tenant_pipeline(
        self, workspace_key: int, settings: Mapping[str, str], *, after_lsn: str = "", wait_seconds: float = 0.0
    ) -> AbstractAsyncContextManager[Connection]: ...

    def autocommit(self, workspace_key: int) -> AbstractAsyncContextManager[Connection]: ...


class RoutedDatabase:
    """`TenantDatabase` over every cluster of *placement*: each call runs on the primary of
    the workspace's cluster. Also raises `UnavailableError` when the workspace's placement
    must be read and the control cluster is down."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement

    async def primary(self, workspace_key: int) -> Database:
        """The primary pool of *workspace_key*'s cluster."""
        return (await self.placement.of(workspace_key)).db

    async def reachable(self, workspace_key: int) -> None:
        """Return at once while the workspace's cluster is up; while it is known to be down,
        wait up to RECOVERY_WAIT_SECONDS for it, then raise `UnavailableError` naming the
        cluster when there are several (a request fails before doing any work for a
        database it cannot reach)."""
        cluster = await self.placement.of(workspace_key)
        availability = cluster.db.availability
        if not availability.up and not await availability.wait_up():
            raise UnavailableError(availability.describe())  # "database cluster '<name>' unreachable for ..."

    def primaries(self) -> list[Database]:
        """Every cluster's primary pool, the control cluster's first (background jobs run on each)."""
        return [c.db for c in self.placement.clusters]

    @asynccontextmanager
    async def tenant(
        self,
        workspace_key: int,
        *,
        pipeline: bool = False,
        after_lsn: str = "",
        wait_seconds: float = 0.0,
        lock_timeout_ms: int = 0,
    ) -> AsyncIterator[Connection]:
        """`Database.tenant` on the workspace's cluster."""
        db = await self.primary(workspace_key)
        async with db.tenant(
            workspace_key,
            pipeline=pipeline,
            after_lsn=after_lsn,
            wait_seconds=wait_seconds,
            lock_timeout_ms=lock_timeout_ms,
        ) as conn:
            yield conn

    @asynccontextmanager
    async def tenant_pipeline(
        self, workspace_key: int, settings: Mapping[str, str], *, after_lsn: str = "", wait_seconds: float = 0.0
    ) -> AsyncIterator[Connection]:
        """`Database.tenant_pipeline` on the workspace's cluster."""
        db = await self.primary(workspace_key)
        async with db.tenant_pipeline(workspace_key, settings, after_lsn=after_lsn, wait_seconds=wait_seconds) as conn:
            yield conn

    @asynccontextmanager
    async def autocommit(self, workspace_key: int) -> AsyncIterator[Connection]:
        """`Database.autocommit` on the workspace's cluster."""
        db = await self.primary(workspace_key)
        async with db.autocommit(workspace_key) as conn:
            yield conn


class RoutedReads:
    """RetrievalService's reads over every cluster of *placement*: each runs by the
    workspace's cluster's `ReadRouter` (its replica or its primary)."""

    def __init__(self, placement: Placement) -> None:
        self._placement = placement

    @property
    def has_replica(self) -> bool:
        """Whether any cluster has a replica (writes then hand out read-your-writes tokens)."""
        return any(c.reads.has_replica for c in self._placement.clusters)

    @property
    def stats(self) -> Counter[str]:
        """Reads by where they ran (`ReadRouter.stats`): with one cluster its router's own
        counter, which goes on counting; with several, the sum of theirs as of this call."""
        if len(self._placement.clusters) == 1:
            return self._placement.control.reads.stats
        total: Counter[str] = Counter()
        for cluster in self._placement.clusters:
            total.update(cluster.reads.stats)
        return total

    async def read(
        self,
        workspace_key: int,
        run: Callable[[Connection], Awaitable[T]],
        *,
        after_lsn: str = "",
        pipeline_settings: Mapping[str, str] | None = None,
    ) -> T:
        """`ReadRouter.read` on the workspace's cluster."""
        cluster = await self._placement.of(workspace_key)
        return await cluster.reads.read(workspace_key, run, after_lsn=after_lsn, pipeline_settings=pipeline_settings)

    async def write_position(self, workspace_key: int) -> tuple[str, int] | None:
        """`ReadRouter.write_position` on the workspace's cluster (None when it has no replica)."""
        cluster = await self._placement.of(workspace_key)
        return await cluster.reads.write_position(workspace_key)

    async def close(self) -> None:
        """Close every cluster's replica pool (the primaries belong to the caller)."""
        for cluster in self._placement.clusters:
            await cluster.reads.close()
