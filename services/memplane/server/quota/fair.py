"""Fair share of a server process's shared resources across workspaces.

Every workspace's requests wait for the same few things: a database connection of the
pool and a model call of the embedder. First come, first served, one tenant's burst of
heavy requests takes them all and another tenant's light search waits behind it for
seconds. Here each workspace is a *flow* with a weight, and waiters are served in the
order of Start-time Fair Queuing (Goyal, Vin and Cheng, "Start-time Fair Queuing: a
scheduling algorithm for integrated services packet switching networks", SIGCOMM 1996):

- a request of flow f arriving when the virtual time is v gets the start tag
  S = max(v, F_f), where F_f is the finish tag of f's previous request, and the finish
  tag F_f = S + cost / weight_f;
- waiters are served in increasing start tag; v is the start tag of the request that last
  entered service.

So a flow that has used much of a resource lately waits behind one that has not, in
proportion to its weight, whatever the arrival order; an idle flow keeps no credit (its
next tag starts at v). The cost of a database hold is its duration: a hold arrives
charged with its flow's recent mean and is corrected by the time it really took when it
ends (as the Linux CFS scheduler charges a task's runtime to its vruntime); the cost of
a model call is the characters embedded, known before it runs. A flow may also hold at
most *capacity - reserve* of a resource at once (`FairGate`, and the embedder's lanes),
so a light request of another flow never waits for one of a heavy flow's holds to end.

The flow of the running request is a context variable (`current_flow`) set by the gRPC
edge once it knows the caller's workspace; work outside a request runs as `SERVER_FLOW`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from memplane.domain.models import Workspace


@dataclass(frozen=True)
class Flow:
    """One workspace's share: its key (0 for the server's own work) and weight (> 0;
    twice the weight, twice the share of a contended resource)."""

    key: int
    weight: float = 1.0


SERVER_FLOW = Flow(0)
"""The flow of work no request carries (background jobs before they know their workspace,
admin transactions, start-up)."""

current_flow: ContextVar[Flow | None] = ContextVar("memplane_flow", default=None)


def flow_of(workspace: Workspace) -> Flow:
    """*workspace*'s flow, weighted by its quota `scheduling_weight` (0: the default 1)."""
    return Flow(workspace.key, float(workspace.quotas.scheduling_weight or 1))


def flow() -> Flow:
    """The flow of the running request (`SERVER_FLOW` outside one)."""
    return current_flow.get() or SERVER_FLOW


class VirtualClock:
    """Start-time fair queuing tags (see the module docstring): one per resource."""

    def __init__(self) -> None:
        self._now = 0.0
        self._finish: dict[int, float] = {}

    def arrive(self, flow: Flow, cost: float) -> float:
        """The start tag of a request of *flow* arriving now that will cost *cost* (any
        unit, the same for every flow of this clock; an estimate may be corrected later
        with `correct`); the flow's finish tag moves on by cost / weight."""
        start = max(self._now, self._finish.get(flow.key, 0.0))
        self._finish[flow.key] = start + cost / flow.weight
        if len(self._finish) > 4096:  # flows whose finish is behind the virtual time have no credit left
            self._finish = {key: tag for key, tag in self._finish.items() if tag > self._now}
        return start

    def started(self, start: float) -> None:
        """A request with start tag *start* entered service: the virtual time is at least it."""
        self._now = max(self._now, start)

    def correct(self, flow: Flow, cost: float) -> None:
        """Charge *flow* a further *cost* (negative: refund), e.g. a request's actual cost
        less the estimate it arrived with."""
        if flow.key in self._finish:
            self._finish[flow.key] += cost / flow.weight


@dataclass(order=True)
class _Waiter:
    tag: float
    seq: int
    flow: Flow = field(compare=False)
    nested: bool = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


_held: ContextVar[frozenset[int]] = ContextVar("memplane_fair_gates_held", default=frozenset())

FIRST_ESTIMATE_SECONDS = 0.01
"""A flow's first hold is expected to last this long (a short search's statements); later
ones, the flow's recent mean (`SMOOTHING`)."""
SMOOTHING = 0.2
"""Weight of the newest hold in a flow's moving mean of hold times (an exponentially
weighted moving average)."""


class FairGate:
    """At most *capacity* holders at once, granted in start-time fair queuing order by
    flow, each flow holding at most ``capacity - reserve`` (at least 1). A hold's cost is
    its duration in seconds: it arrives charged with its flow's recent mean hold time and
    is corrected by the time it really took when it ends. A request that already holds
    this gate (a nested hold in the same task) is not held back by its flow's cap, so
    nesting cannot deadlock a flow at its cap."""

    def __init__(self, capacity: int, reserve: int = 1) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.flow_cap = max(1, capacity - max(0, reserve))
        self._clock = VirtualClock()
        self._running = 0
        self._per_flow: dict[int, int] = {}
        self._mean: dict[int, float] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    def held_by(self, who: Flow) -> int:
        """Holds of *who* now."""
        return self._per_flow.get(who.key, 0)

    @property
    def waiting(self) -> int:
        """Requests waiting for a hold now."""
        return sum(1 for w in self._waiting if not w.future.done())

    @contextlib.asynccontextmanager
    async def hold(self, who: Flow | None = None) -> AsyncIterator[None]:
        """Hold one unit for the body of the `async with`, waiting for it in fair order;
        *who* defaults to the running request's flow. Raises `asyncio.CancelledError` (or
        the caller's timeout) while waiting, holding nothing."""
        who = who or flow()
        nested = id(self) in _held.get()
        estimate = self._mean.get(who.key, FIRST_ESTIMATE_SECONDS)
        tag = self._clock.arrive(who, estimate)
        if self._waiting or not self._admissible(who, nested):
            waiter = _Waiter(tag, next(self._seq), who, nested, asyncio.get_running_loop().create_future())
            heapq.heappush(self._waiting, waiter)
            self._grant()
            try:
                await waiter.future  # resolved by _grant, which counts the hold
            except BaseException:
                if waiter.future.done() and not waiter.future.cancelled():  # granted in the same tick
                    self._release(who, estimate, estimate)
                else:
                    waiter.future.cancel()
                    self._clock.correct(who, -estimate)
                    self._grant()
                raise
        else:
            self._take(who, tag)
        token = _held.set(_held.get() | {id(self)})
        began = time.monotonic()
        try:
            yield
        finally:
            _held.reset(token)
            self._release(who, estimate, time.monotonic() - began)

    def _admissible(self, who: Flow, nested: bool) -> bool:
        return self._running < self.capacity and (nested or self._per_flow.get(who.key, 0) < self.flow_cap)

    def _take(self, who: Flow, tag: float) -> None:
        self._running += 1
        self._per_flow[who.key] = self._per_flow.get(who.key, 0) + 1
        self._clock.started(tag)

    def _release(self, who: Flow, estimate: float, seconds: float) -> None:
        self._running -= 1
        left = self._per_flow[who.key] - 1
        if left:
            self._per_flow[who.key] = left
        else:
            del self._per_flow[who.key]
        self._clock.correct(who, seconds - estimate)
        mean = self._mean.get(who.key, seconds)
        self._mean[who.key] = (1 - SMOOTHING) * mean + SMOOTHING * seconds
        if len(self._mean) > 4096:
            self._mean = {key: value for key, value in self._mean.items() if key in self._per_flow}
        self._grant()

    def _grant(self) -> None:
        """Hand free units to waiters in start-tag order, passing over (not removing) those
        whose flow is at its cap."""
        passed: list[_Waiter] = []
        while self._waiting and self._running < self.capacity:
            waiter = heapq.heappop(self._waiting)
            if waiter.future.done():  # cancelled while waiting
                continue
            if not self._admissible(waiter.flow, waiter.nested):
                passed.append(waiter)
                continue
            self._take(waiter.flow, waiter.tag)
            waiter.future.set_result(None)
        for waiter in passed:
            heapq.heappush(self._waiting, waiter)
