"""Which PostgreSQL cluster holds each workspace (issue 30): the placement map, and the rule
that places a new workspace.

Every cluster holds the whole schema (migrations run on each). The first cluster is the
*control* cluster: besides workspaces of its own, it holds the control plane — `workspaces`
(every workspace's row, whose identity gives the keys), `api_keys`, `server_secrets` and the
placement map `placements` (migration 0022: workspace key → cluster name). A cluster's own
`workspaces` table holds a copy of the row of each workspace placed there (same key), which
its foreign keys, quota checks and `memplane_enter_workspace` read
(`memplane.server.storage.workspaces`).

The rule: a new workspace goes to the cluster its CreateWorkspace names, else to the one
with the fewest workspaces (the first of those, in settings order, on a tie), passing over
a cluster this process knows to be down. A workspace
stays where it was placed (moving one is issue 30's item 2), so this process keeps every
placement it has read: all of them at start (`load`), and a workspace created by another
process when its first request comes here — one query to the control cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from memplane.errors import FailedPreconditionError, UnavailableError
from memplane.server.storage.database import Connection, Database
from memplane.server.storage.replica import ReadRouter

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """One configured PostgreSQL cluster: its name, its primary's pool and its reads
    (a streaming replica by `ReadRouter`'s rule, or the primary)."""

    name: str
    db: Database
    reads: ReadRouter


class Placement:
    """The placement map of this process over *clusters* (the control cluster first; opened
    by the caller). Call `await load()` once the clusters are open."""

    def __init__(self, clusters: Sequence[Cluster]) -> None:
        if not clusters:
            raise ValueError("placement needs at least one cluster")
        names = [c.name for c in clusters]
        if len(set(names)) < len(names):
            raise ValueError(f"cluster names must be unique, got {names}")
        self.clusters: tuple[Cluster, ...] = tuple(clusters)
        self._by_name = {c.name: c for c in clusters}
        self._placed: dict[int, Cluster] = {}
        self._unplaced: set[int] = set()  # keys read with no placement: answered with the control cluster

    @property
    def control(self) -> Cluster:
        """The control cluster (the first): workspaces, API keys, placements."""
        return self.clusters[0]

    @property
    def names(self) -> list[str]:
        """The clusters' names, in settings order."""
        return [c.name for c in self.clusters]

    def named(self, name: str) -> Cluster:
        """The cluster called *name*. Raises `UnavailableError` for a name this server is
        not configured with (a placement written by a server with other settings)."""
        cluster = self._by_name.get(name)
        if cluster is None:
            raise UnavailableError(
                f"the workspace is placed on database cluster {name!r}, which this server is not configured with "
                f"(database.clusters: {', '.join(self.names)})"
            )
        return cluster

    async def load(self) -> int:
        """Write the placement of every workspace that has none (created before migration
        0022: on the control cluster), then read every placement; their number. Raises
        `UnavailableError` when the control cluster cannot be reached."""
        async with self.control.db.admin() as conn:
            await conn.execute(
                "INSERT INTO placements (workspace_key, cluster) SELECT w.key, %s FROM workspaces w"
                " WHERE NOT EXISTS (SELECT 1 FROM placements p WHERE p.workspace_key = w.key)"
                " ON CONFLICT (workspace_key) DO NOTHING",
                (self.control.name,),
            )
            cur = await conn.execute("SELECT workspace_key, cluster FROM placements")
            rows = await cur.fetchall()
        for row in rows:
            if row["cluster"] in self._by_name:
                self._placed[int(row["workspace_key"])] = self._by_name[row["cluster"]]
            else:
                _log.warning("workspace %s is placed on unknown cluster %r", row["workspace_key"], row["cluster"])
        return len(rows)

    async def check(self) -> None:
        """Raise `FailedPreconditionError` when a cluster other than the control one (and
        up) holds a workspace the control cluster does not place there: a database that
        served alone before, added as a cluster (its keys would collide with the control
        cluster's, and its workspaces would be reachable by no key). Each cluster's keys
        are read before the control cluster's placements, and a workspace's placement is
        committed before its copy is made, so a workspace being created is never taken
        for a stray one. Raises `UnavailableError` when the control cluster is down."""
        for cluster in self.clusters[1:]:
            if not cluster.db.availability.up:
                continue  # checked by nobody: it joins when it answers (a fresh cluster by then)
            async with cluster.db.admin() as conn:
                cur = await conn.execute("SELECT key, name FROM workspaces ORDER BY key")
                held = {int(r["key"]): str(r["name"]) for r in await cur.fetchall()}
            if not held:
                continue
            async with self.control.db.admin() as conn:
                cur = await conn.execute(
                    "SELECT workspace_key FROM placements WHERE cluster = %s AND workspace_key = ANY(%s)",
                    (cluster.name, list(held)),
                )
                placed = {int(r["workspace_key"]) for r in await cur.fetchall()}
            stray = sorted(set(held) - placed)
            if stray:
                names = ", ".join(held[k] for k in stray[:5]) + (", ..." if len(stray) > 5 else "")
                raise FailedPreconditionError(
                    f"database cluster {cluster.name!r} holds {len(stray)} workspace(s) the control cluster "
                    f"{self.control.name!r} does not place there ({names}): a database that served on its own "
                    "cannot join as another cluster"
                )

    async def of(self, workspace_key: int) -> Cluster:
        """The cluster of *workspace_key*: as remembered, or read from the control cluster
        (then remembered). A workspace with no placement is answered with the control
        cluster, and remembered as such (not counted by `counts`), so its calls do not
        each read it again: one created by a server without placements (during an upgrade,
        after `load`) is there, and one deleted, or never created, is refused by the control
        cluster's `memplane_enter_workspace` (a key is never reused, and a workspace's
        placement commits with its row). Raises `UnavailableError` when it must
        be read and the control cluster is down, or it names a cluster this server is not
        configured with."""
        cluster = self._placed.get(workspace_key)
        if cluster is not None:
            return cluster
        if workspace_key in self._unplaced:
            return self.control
        async with self.control.db.admin() as conn:
            cur = await conn.execute("SELECT cluster FROM placements WHERE workspace_key = %s", (workspace_key,))
            row = await cur.fetchone()
        if row is None:
            self._unplaced.add(workspace_key)
            return self.control
        cluster = self.named(str(row["cluster"]))
        self._placed[workspace_key] = cluster
        return cluster

    async def choose(self, requested: str = "") -> Cluster:
        """The cluster for a new workspace: *requested* (a configured name), else the one
        with the fewest workspaces, the first of those on a tie, among those not known to
        be down (`Database.availability`; all of them if every one is). Raises `UnavailableError`
        for an unknown *requested* name (the admin service checks it first) or when the
        control cluster is down."""
        if requested:
            return self.named(requested)
        if len(self.clusters) == 1:
            return self.control
        async with self.control.db.admin() as conn:
            cur = await conn.execute("SELECT cluster, count(*) AS n FROM placements GROUP BY cluster")
            counts = {str(r["cluster"]): int(r["n"]) for r in await cur.fetchall()}
        # A cluster known to be down is passed over while another is up; min keeps the first of equals.
        up = [c for c in self.clusters if c.db.availability.up] or list(self.clusters)
        return min(up, key=lambda c: counts.get(c.name, 0))

    async def record(self, conn: Connection, workspace_key: int, cluster: Cluster) -> None:
        """In the caller's transaction on the control cluster: *workspace_key* is placed
        on *cluster* (remembered here once the caller calls `remember`)."""
        await conn.execute(
            "INSERT INTO placements (workspace_key, cluster) VALUES (%s, %s)", (workspace_key, cluster.name)
        )

    def remember(self, workspace_key: int, cluster: Cluster) -> None:
        """Keep *workspace_key*'s placement (after the transaction that recorded it committed)."""
        self._unplaced.discard(workspace_key)
        self._placed[workspace_key] = cluster

    def forget(self, workspace_key: int) -> None:
        """Drop *workspace_key*'s placement (its workspace was deleted)."""
        self._placed.pop(workspace_key, None)
        self._unplaced.discard(workspace_key)

    def counts(self) -> dict[str, int]:
        """Workspaces placed per cluster, as this process knows them (every cluster named)."""
        counts = dict.fromkeys(self.names, 0)
        for cluster in self._placed.values():
            counts[cluster.name] += 1
        return counts
