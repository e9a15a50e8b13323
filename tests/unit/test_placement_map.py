"""The placement map of one process (`Placement`), over fake clusters that answer its
queries from a dict: a workspace's cluster is read from the control cluster once, then
remembered, with or without a placement; a placement on a cluster this server is not
configured with is UNAVAILABLE naming it; the rule picks the fewest, the first on a tie,
passing over a cluster known to be down; the clusters given must be some, of distinct
names."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from memplane.errors import UnavailableError
from memplane.server.storage.database import Database
from memplane.server.storage.placement import Cluster, Placement
from memplane.server.storage.replica import ReadRouter


@dataclass
class _Availability:
    up: bool = True


@dataclass
class _Cursor:
    rows: list[dict[str, Any]]

    async def fetchone(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None

    async def fetchall(self) -> list[dict[str, Any]]:
        return self.rows


@dataclass
class _ControlDb:
    """The control cluster's `placements` (workspace key -> cluster name), and the queries read."""

    placements: dict[int, str] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    availability: _Availability = field(default_factory=_Availability)

    async def execute(self, query: str, params: tuple[Any, ...] = ()) -> _Cursor:
        self.queries.append(query)
        if query.startswith("SELECT cluster FROM placements WHERE workspace_key"):
            name = self.placements.get(params[0])
            return _Cursor([] if name is None else [{"cluster": name}])
        if query.startswith("SELECT cluster, count(*)"):
            counts: dict[str, int] = {}
            for name in self.placements.values():
                counts[name] = counts.get(name, 0) + 1
            return _Cursor([{"cluster": n, "n": c} for n, c in counts.items()])
        raise AssertionError(f"unexpected query {query!r}")

    @contextlib.asynccontextmanager
    async def admin(self) -> AsyncIterator[_ControlDb]:
        yield self


def _cluster(name: str, db: object) -> Cluster:
    return Cluster(name, cast(Database, db), cast(ReadRouter, None))


def _placement(control: _ControlDb, *others: str) -> tuple[Placement, dict[str, _ControlDb]]:
    dbs = {"a": control} | {name: _ControlDb() for name in others}
    return Placement([_cluster(name, db) for name, db in dbs.items()]), dbs


async def test_a_placement_is_read_once_then_remembered() -> None:
    control = _ControlDb(placements={7: "b"})
    placement, _ = _placement(control, "b")
    assert (await placement.of(7)).name == "b"
    assert (await placement.of(7)).name == "b"
    assert len(control.queries) == 1
    assert placement.counts() == {"a": 0, "b": 1}


async def test_a_workspace_without_a_placement_is_on_the_control_cluster_and_read_once() -> None:
    # A workspace created by a server without placements (an upgrade under way), or one
    # deleted: on the code before, every call of it read the control cluster again (two
    # or three reads a request: authentication, then each transaction).
    control = _ControlDb()
    placement, _ = _placement(control, "b")
    for _ in range(3):
        assert (await placement.of(9)).name == "a"
    assert len(control.queries) == 1
    assert placement.counts() == {"a": 0, "b": 0}  # counted by nobody: it has no placement
    placement.remember(9, placement.named("b"))
    assert (await placement.of(9)).name == "b"


async def test_a_placement_on_a_cluster_not_configured_is_unavailable_naming_it() -> None:
    placement, _ = _placement(_ControlDb(placements={3: "gone"}), "b")
    with pytest.raises(UnavailableError, match=r"'gone'.*database\.clusters: a, b"):
        await placement.of(3)
    with pytest.raises(UnavailableError, match="'north'"):
        await placement.choose("north")


async def test_the_rule_takes_the_fewest_the_first_on_a_tie_and_passes_over_a_cluster_that_is_down() -> None:
    control = _ControlDb(placements={1: "a", 2: "b"})
    placement, dbs = _placement(control, "b", "c")
    assert (await placement.choose()).name == "c"
    control.placements[3] = "c"
    assert (await placement.choose()).name == "a"  # a tie of all three: the first
    dbs["a"].availability.up = False
    assert (await placement.choose()).name == "b"
    for db in dbs.values():
        db.availability.up = False
    assert (await placement.choose()).name == "a"  # every one down: the rule over all of them
    assert (await placement.choose("c")).name == "c"


@pytest.mark.parametrize(("names", "refusal"), [([], "at least one cluster"), (["a", "a"], "cluster names")])
def test_no_clusters_or_two_of_one_name_are_refused(names: list[str], refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        Placement([_cluster(name, _ControlDb()) for name in names])
