"""Fair share of a shared resource across workspaces (memplane.server.quota.fair.FairGate):
start-time fair queuing order, a cap per workspace, weights, cancellation, nesting."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from memplane.server.quota.fair import FairGate, Flow, VirtualClock, current_flow, flow


async def _holding(gate: FairGate, who: Flow, release: asyncio.Event, log: list[int]) -> None:
    async with gate.hold(who):
        log.append(who.key)
        await release.wait()


async def _turns() -> None:
    for _ in range(5):
        await asyncio.sleep(0)  # loop turns for grants to be handed out


async def test_one_workspace_holds_all_but_the_reserve_and_another_gets_it_at_once() -> None:
    gate = FairGate(4, reserve=1)
    release = asyncio.Event()
    log: list[int] = []
    noisy = [asyncio.create_task(_holding(gate, Flow(1), release, log)) for _ in range(6)]
    await _turns()
    assert gate.held_by(Flow(1)) == 3
    assert gate.waiting == 3
    quiet = asyncio.create_task(_holding(gate, Flow(2), release, log))
    await _turns()
    assert gate.held_by(Flow(2)) == 1  # the reserved unit, without waiting for the noisy workspace
    release.set()
    await asyncio.gather(*noisy, quiet)
    assert log.count(1) == 6
    assert gate.held_by(Flow(1)) == 0
    assert gate.waiting == 0


async def test_a_light_workspace_is_served_before_a_heavy_ones_queue() -> None:
    gate = FairGate(1, reserve=0)
    release = asyncio.Event()
    log: list[int] = []
    tasks = [asyncio.create_task(_holding(gate, Flow(1), release, log)) for _ in range(4)]
    await _turns()
    tasks.append(asyncio.create_task(_holding(gate, Flow(2), release, log)))  # arrives last
    await _turns()
    release.set()
    await asyncio.gather(*tasks)
    assert log == [1, 2, 1, 1, 1]  # right after the hold in progress


async def test_units_are_shared_by_weight_while_both_wait() -> None:
    gate = FairGate(1, reserve=0)
    release = asyncio.Event()
    log: list[int] = []
    blocker = asyncio.create_task(_holding(gate, Flow(9), release, log))
    await _turns()
    light, heavy = Flow(1, weight=1.0), Flow(2, weight=2.0)
    tasks = [asyncio.create_task(_holding(gate, who, release, log)) for _ in range(8) for who in (light, heavy)]
    await _turns()
    release.set()
    await asyncio.gather(blocker, *tasks)
    first_9 = log[1:10]
    assert first_9.count(2) == 6
    assert first_9.count(1) == 3


async def test_a_caller_cancelled_while_waiting_holds_nothing() -> None:
    gate = FairGate(1, reserve=0)
    release = asyncio.Event()
    log: list[int] = []
    holder = asyncio.create_task(_holding(gate, Flow(1), release, log))
    await _turns()
    waiter = asyncio.create_task(_holding(gate, Flow(2), release, log))
    await _turns()
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    assert gate.waiting == 0
    release.set()
    await holder
    async with gate.hold(Flow(3)):
        assert gate.held_by(Flow(3)) == 1
    assert log == [1]


async def test_a_nested_hold_is_not_held_back_by_its_workspaces_cap() -> None:
    gate = FairGate(2, reserve=1)  # one workspace: one unit at a time
    async with gate.hold(Flow(1)), gate.hold(Flow(1)):  # the same request's second connection
        assert gate.held_by(Flow(1)) == 2


async def test_the_flow_of_a_request_is_its_context() -> None:
    assert flow().key == 0  # outside a request: the server's own
    token = current_flow.set(Flow(7, weight=2.0))
    try:
        assert flow() == Flow(7, weight=2.0)
    finally:
        current_flow.reset(token)


def test_an_idle_flow_keeps_no_credit() -> None:
    clock = VirtualClock()
    busy, idle = Flow(1), Flow(2)
    for _ in range(10):
        clock.started(clock.arrive(busy, 1.0))
    assert clock.arrive(idle, 1.0) == pytest.approx(9.0)  # starts at the virtual time, not at 0
