"""GroupCommitter's scheduling, with runners that record what they were given: a lone add
goes at once, adds arriving while the workspace is busy go together in arrival order, a
failed group runs member by member, and a caller who left is not run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from memplane.domain.models import Workspace
from memplane.server.writeback.group_commit import GroupCommitter, PendingAdd

NOW = datetime(2026, 12, 7, tzinfo=UTC)
WS = Workspace(key=1, name="a", embedding_model="m", embedding_dimensions=4, created_at=NOW)
OTHER = Workspace(key=2, name="b", embedding_model="m", embedding_dimensions=4, created_at=NOW)


def add(name: str) -> PendingAdd:
    return PendingAdd(prepared=(), record=None, actor="test", request_id=name, now=NOW)


class Runners:
    """run_one and run_group that log each call and, while `gate` is clear, hold every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.cancelled: list[tuple[str, ...]] = []  # calls cancelled while held
        self.gate = asyncio.Event()
        self.group_gate = self.gate  # a test may hold groups apart from lone runs
        self.fail_group = False
        self.fail_alone: set[str] = set()

    async def one(self, workspace: Workspace, item: PendingAdd) -> str:
        self.calls.append((item.request_id,))
        await self._held((item.request_id,), self.gate)
        if item.request_id in self.fail_alone:
            raise ValueError(item.request_id)
        return f"{workspace.name}:{item.request_id}"

    async def group(self, workspace: Workspace, items: Sequence[PendingAdd]) -> list[str]:
        self.calls.append(tuple(i.request_id for i in items))
        await self._held(self.calls[-1], self.group_gate)
        if self.fail_group:
            raise RuntimeError("a member failed")
        return [f"{workspace.name}:{i.request_id}" for i in items]

    async def _held(self, call: tuple[str, ...], gate: asyncio.Event) -> None:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            self.cancelled.append(call)
            raise


async def started(runners: Runners, count: int) -> None:
    """Until the runners were called *count* times."""
    while len(runners.calls) < count:  # noqa: ASYNC110  # a call list raises no event
        await asyncio.sleep(0)


async def queued(committer: GroupCommitter[str], workspace: Workspace, count: int) -> None:
    """Until *count* adds of *workspace* wait."""
    while committer.waiting(workspace.key) < count:  # noqa: ASYNC110  # the committer's count raises no event
        await asyncio.sleep(0)


async def busy(committer: GroupCommitter[str], runners: Runners) -> asyncio.Task[str]:
    """Start add "r1" of WS and wait until it runs (held): later adds of WS then wait."""
    first = asyncio.create_task(committer.insert(WS, add("r1")))
    await started(runners, 1)
    return first


def committer_for(runners: Runners, *, max_inflight: int = 1, max_members: int = 64) -> GroupCommitter[str]:
    return GroupCommitter(runners.one, runners.group, max_inflight=max_inflight, max_members=max_members)


async def test_a_lone_add_runs_at_once_and_others_wait_to_go_together() -> None:
    runners = Runners()
    committer = committer_for(runners)
    first = await busy(committer, runners)
    rest = [asyncio.create_task(committer.insert(WS, add(f"r{i}"))) for i in range(2, 6)]
    await queued(committer, WS, 4)
    assert runners.calls == [("r1",)]  # nothing of the waiting ones has run
    runners.gate.set()
    assert await first == "a:r1"
    assert [await t for t in rest] == ["a:r2", "a:r3", "a:r4", "a:r5"]
    assert runners.calls == [("r1",), ("r2", "r3", "r4", "r5")]
    assert (committer.groups, committer.grouped, committer.fallbacks) == (1, 4, 0)
    assert committer.waiting(WS.key) == 0


async def test_workspaces_do_not_wait_for_each_other() -> None:
    runners = Runners()
    committer = committer_for(runners)
    tasks = [asyncio.create_task(committer.insert(w, add(w.name))) for w in (WS, OTHER)]
    await started(runners, 2)
    assert runners.calls == [("a",), ("b",)]
    runners.gate.set()
    assert [await t for t in tasks] == ["a:a", "b:b"]


async def test_max_inflight_adds_go_alone_before_any_waits() -> None:
    runners = Runners()
    committer = committer_for(runners, max_inflight=2)
    tasks = [asyncio.create_task(committer.insert(WS, add(f"r{i}"))) for i in range(1, 5)]
    await started(runners, 2)
    await queued(committer, WS, 2)
    assert runners.calls == [("r1",), ("r2",)]
    runners.gate.set()
    assert [await t for t in tasks] == ["a:r1", "a:r2", "a:r3", "a:r4"]
    assert runners.calls == [("r1",), ("r2",), ("r3", "r4")]


async def test_a_group_holds_at_most_max_members() -> None:
    runners = Runners()
    committer = committer_for(runners, max_members=2)
    tasks = [asyncio.create_task(committer.insert(WS, add(f"r{i}"))) for i in range(1, 7)]
    await started(runners, 1)
    await queued(committer, WS, 5)
    runners.gate.set()
    await asyncio.gather(*tasks)
    assert runners.calls == [("r1",), ("r2", "r3"), ("r4", "r5"), ("r6",)]


async def test_a_failed_group_runs_each_member_alone_for_its_own_outcome() -> None:
    runners = Runners()
    runners.fail_group = True
    runners.fail_alone = {"r3"}
    committer = committer_for(runners)
    tasks = [asyncio.create_task(committer.insert(WS, add(f"r{i}"))) for i in range(1, 5)]
    await started(runners, 1)
    await queued(committer, WS, 3)
    runners.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[:2] == ["a:r1", "a:r2"]
    assert isinstance(results[2], ValueError)
    assert str(results[2]) == "r3"
    assert results[3] == "a:r4"
    assert runners.calls[:2] == [("r1",), ("r2", "r3", "r4")]
    assert sorted(runners.calls[2:]) == [("r2",), ("r3",), ("r4",)]
    assert (committer.groups, committer.fallbacks) == (0, 1)


async def test_a_caller_who_left_while_waiting_is_not_run() -> None:
    runners = Runners()
    committer = committer_for(runners)
    first = await busy(committer, runners)
    leaving = asyncio.create_task(committer.insert(WS, add("r2")))
    staying = asyncio.create_task(committer.insert(WS, add("r3")))
    await queued(committer, WS, 2)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert committer.waiting(WS.key) == 1
    runners.gate.set()
    assert (await first, await staying) == ("a:r1", "a:r3")
    assert runners.calls == [("r1",), ("r3",)]


async def test_a_lone_add_that_fails_raises_to_its_caller_and_frees_the_workspace() -> None:
    runners = Runners()
    runners.fail_alone = {"r1"}
    runners.gate.set()
    committer = committer_for(runners)
    with pytest.raises(ValueError, match="r1"):
        await committer.insert(WS, add("r1"))
    assert await committer.insert(WS, add("r2")) == "a:r2"
    assert runners.calls == [("r1",), ("r2",)]


def test_limits_are_checked() -> None:
    runners = Runners()
    with pytest.raises(ValueError, match="max_inflight"):
        GroupCommitter(runners.one, runners.group, max_inflight=0, max_members=2)
    with pytest.raises(ValueError, match="max_members"):
        GroupCommitter(runners.one, runners.group, max_inflight=1, max_members=1)


async def test_a_group_whose_callers_all_left_is_cancelled_and_not_run_again() -> None:
    runners = Runners()
    runners.fail_group = True  # were it to end, it would fail and fall back to lone runs
    runners.group_gate = asyncio.Event()
    committer = committer_for(runners)
    first = await busy(committer, runners)
    leaving = [asyncio.create_task(committer.insert(WS, add(f"r{i}"))) for i in (2, 3)]
    await queued(committer, WS, 2)
    runners.gate.set()
    await first  # r2 and r3 go to the database as a group, held by group_gate
    await started(runners, 2)
    assert runners.calls == [("r1",), ("r2", "r3")]
    for task in leaving:
        task.cancel()
    await asyncio.gather(*leaving, return_exceptions=True)
    while committer.waiting(WS.key) or runners.cancelled != [("r2", "r3")]:  # noqa: ASYNC110  # no event to wait on
        await asyncio.sleep(0)
    assert runners.calls == [("r1",), ("r2", "r3")]  # no lone re-runs
    assert committer.fallbacks == 0
    assert await committer.insert(WS, add("r4")) == "a:r4"  # the workspace is free again


async def test_a_failed_group_does_not_rerun_a_member_whose_caller_left() -> None:
    runners = Runners()
    runners.group_gate = asyncio.Event()
    committer = committer_for(runners)
    first = await busy(committer, runners)
    leaving = asyncio.create_task(committer.insert(WS, add("r2")))
    staying = asyncio.create_task(committer.insert(WS, add("r3")))
    await queued(committer, WS, 2)
    runners.gate.set()
    await first
    await started(runners, 2)  # the group (r2, r3) is held by group_gate
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    runners.fail_group = True
    runners.group_gate.set()
    assert await staying == "a:r3"
    assert runners.calls == [("r1",), ("r2", "r3"), ("r3",)]
    assert committer.fallbacks == 1
