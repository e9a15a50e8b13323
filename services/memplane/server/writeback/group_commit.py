"""Group commit: concurrent small adds of one workspace share a transaction.

One AddMemories of one memory is a statement committed on its own: a pooled connection,
a round trip, a commit and its WAL flush, and the event loop's waits on each. When
several agents write to one workspace at once, each paid all of that. Here a workspace
has at most *max_inflight* inserts in flight from this process; an add arriving while
they are busy waits, and when one finishes, everything that waited (up to *max_members*)
goes to the database together: one tenant transaction in pipeline mode, each add's own
`memplane_insert_memories` statement (its request record, actor, request id, time and
duplicate check), one round trip and one commit. Every caller is answered only after that
commit, with its own outcome.

Nothing waits while the workspace is idle: a lone writer's add goes at once, as before,
so a single caller's latency is unchanged (the classic group commit of databases, led by
whichever write finds the log busy: Gray & Reuter, "Transaction Processing", 9.4.7;
PostgreSQL does the same for WAL flushes, `commit_delay` aside).

A group's statements commit or roll back together. If the group fails for any reason (a
member over its quota, a duplicate-content race, the database going away), nothing of it
was committed, and each member runs again alone, so each caller gets exactly the outcome
or error its add would have had without grouping.

A caller who leaves (its deadline passed, its RPC cancelled) is dropped as a lone add is:
while it waits, from the next group; once its group is running, the group carries on for
the others, and is cancelled (its statements with it) when every one of its callers has
left; a member whose caller left is not run again alone after a failed group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from memplane.domain.models import Workspace
from memplane.server.storage.inserts import PreparedMemory, RequestRecord

R = TypeVar("R")


@dataclass(frozen=True)
class PendingAdd:
    """One caller's insert: its prepared memories, idempotency record (None without a
    request id), the actor and request id its events record, and its time."""

    prepared: Sequence[PreparedMemory]
    record: RequestRecord | None
    actor: str
    request_id: str
    now: datetime


RunOne = Callable[[Workspace, PendingAdd], Awaitable[R]]
RunGroup = Callable[[Workspace, Sequence[PendingAdd]], Awaitable[list[R]]]


_Member = tuple[PendingAdd, "asyncio.Future[R]"]  # an add that waits, and its caller's answer


@dataclass(eq=False)
class _Lane(Generic[R]):
    """A workspace's inserts from this process: how many are in flight, and who waits."""

    inflight: int = 0
    waiting: list[_Member[R]] = field(default_factory=list)


class GroupCommitter(Generic[R]):
    """Runs each workspace's inserts through *run_one* (one add, its own transaction) or,
    for adds that waited together, *run_group* (their results in order, one transaction;
    raises if any member fails, having committed nothing). `insert` returns what either
    returned for that add, or raises what *run_one* raised for it.

    *max_inflight* (>= 1): inserts of one workspace in flight at once from this process;
    *max_members* (>= 2): adds in one group at most. Raises `ValueError` otherwise."""

    def __init__(self, run_one: RunOne[R], run_group: RunGroup[R], *, max_inflight: int, max_members: int) -> None:
        if max_inflight < 1 or max_members < 2:
            raise ValueError("max_inflight must be >= 1 and max_members >= 2")
        self._run_one = run_one
        self._run_group = run_group
        self._max_inflight = max_inflight
        self._max_members = max_members
        self._lanes: dict[int, _Lane[R]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # the groups running (a task needs a reference)
        self.groups = 0  # groups of two or more committed together (statistics)
        self.grouped = 0  # adds answered from such a group
        self.fallbacks = 0  # groups that failed and ran member by member

    def waiting(self, workspace_key: int) -> int:
        """Adds of the workspace waiting for the next group (not cancelled)."""
        lane = self._lanes.get(workspace_key)
        return sum(not w.done() for _, w in lane.waiting) if lane is not None else 0

    async def insert(self, workspace: Workspace, add: PendingAdd) -> R:
        """Insert *add* now if its workspace has room in flight, else with the next group."""
        lane = self._lanes.setdefault(workspace.key, _Lane())
        if lane.inflight < self._max_inflight:
            lane.inflight += 1
            try:
                return await self._run_one(workspace, add)
            finally:
                self._finished(workspace, lane)
        waiter: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        lane.waiting.append((add, waiter))
        return await waiter  # a caller cancelled while waiting is skipped (its future is done)

    def _finished(self, workspace: Workspace, lane: _Lane[R]) -> None:
        lane.inflight -= 1
        while lane.waiting and lane.inflight < self._max_inflight:
            members = [(a, w) for a, w in lane.waiting[: self._max_members] if not w.done()]
            del lane.waiting[: self._max_members]
            if members:
                lane.inflight += 1
                task = asyncio.get_running_loop().create_task(self._run(workspace, lane, members))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if lane.inflight == 0 and not lane.waiting and self._lanes.get(workspace.key) is lane:
            del self._lanes[workspace.key]

    async def _run(self, workspace: Workspace, lane: _Lane[R], members: list[_Member[R]]) -> None:
        try:
            if len(members) == 1:
                await _settle(members[0][1], self._run_one(workspace, members[0][0]))
                return
            try:
                results = await _unless_all_left(
                    [w for _, w in members], self._run_group(workspace, [a for a, _ in members])
                )
            except _AllLeft:
                return
            except Exception:  # nothing committed: each member alone, for its own outcome or error
                self.fallbacks += 1
                await asyncio.gather(*(_settle(w, self._run_one(workspace, a)) for a, w in members if not w.done()))
                return
            self.groups += 1
            self.grouped += len(members)
            for (_, waiter), result in zip(members, results, strict=True):
                if not waiter.done():
                    waiter.set_result(result)
        except asyncio.CancelledError:
            for _, waiter in members:
                waiter.cancel()
            raise
        finally:
            self._finished(workspace, lane)


class _AllLeft(Exception):  # noqa: N818 - a control-flow signal
    """Every caller of a group left (their deadline passed, or they were cancelled)."""


async def _unless_all_left(waiters: Sequence[asyncio.Future[R]], work: Awaitable[list[R]]) -> list[R]:
    """*work*'s result; cancelled (`_AllLeft` raised) once every one of *waiters* is done
    without it, as a lone add's statement is cancelled when its caller leaves: a group
    nobody waits for does not hold its connection and its place in a lock's queue until
    statement_timeout."""
    task = asyncio.ensure_future(work)
    abandoned = False

    def left(_: object) -> None:
        nonlocal abandoned
        if not task.done() and all(w.done() for w in waiters):
            abandoned = True
            task.cancel()

    for waiter in waiters:
        waiter.add_done_callback(left)
    left(None)  # all may have left before the group started
    try:
        return await task
    except asyncio.CancelledError:
        if abandoned and not _cancelling():
            raise _AllLeft from None
        raise


async def _settle(waiter: asyncio.Future[R], work: Awaitable[R]) -> None:
    """Run *work* and hand its result or error to *waiter*; cancel it if *waiter*'s caller
    leaves first (as a lone add is cancelled with its RPC)."""
    task = asyncio.ensure_future(work)

    def left(_: object) -> None:
        if waiter.cancelled():
            task.cancel()

    waiter.add_done_callback(left)
    try:
        result = await task
    except asyncio.CancelledError:
        if waiter.cancelled() and not _cancelling():
            return
        raise
    except Exception as error:
        if not waiter.done():
            waiter.set_exception(error)
        return
    if not waiter.done():
        waiter.set_result(result)


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not only what it awaited)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0
