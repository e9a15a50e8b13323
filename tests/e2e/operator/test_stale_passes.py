"""Passes of one MemoryWorkspace handed a body older than what another pass of the same
process already wrote — as kopf does: a change handler and the resync timer share one
body, refreshed only when the object's next watch event is processed, and each handler's
status patch is applied after it returns, outside the object's lock. The steps are driven
directly, in the order the race takes (no API server: the sandbox step of a docker class
calls none), against real Podman behind its Docker-compatible socket (tests/fix_podman.py);
the containers are looked at through the Engine API."""

from __future__ import annotations

import copy
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiodocker
import pytest

from memplane_operator import steps
from memplane_operator.backends.docker import CLASS_LABEL
from memplane_operator.conditions import SANDBOX_READY
from memplane_operator.context import Runtime
from memplane_operator.sandbox.backed import ACTIVITY_ANNOTATION, stamp
from memplane_operator.settings import OperatorSettings
from memplane_operator.sync.state import SyncBook
from tests.fix_podman import SANDBOX_IMAGE, podman_socket

__all__ = ["podman_socket"]  # the session fixture, visible to the tests here

LOG = logging.getLogger("test-stale-passes")
AN_HOUR_AGO = stamp(datetime.now(UTC) - timedelta(hours=1))


@pytest.fixture
async def new_runtime() -> AsyncIterator[Callable[[], Runtime]]:
    """Makes a process's runtime (the AdminService and the API server are never called
    here); the backends each opened are closed at the end, as the operator does at exit."""
    settings = OperatorSettings.model_validate({"admin_key": "unused", "admin_target": "127.0.0.1:1"})
    unused: Any = None
    made: list[Runtime] = []

    def make() -> Runtime:
        made.append(Runtime(settings=settings, admin=unused, kube=unused, syncs=SyncBook()))
        return made[-1]

    yield make
    for runtime in made:
        await runtime.sandboxes.close()


@pytest.fixture
async def engine(podman_socket: str) -> AsyncIterator[aiodocker.Docker]:
    docker = aiodocker.Docker(url=podman_socket)
    yield docker
    await docker.close()


@pytest.fixture
async def class_name(engine: aiodocker.Docker) -> AsyncIterator[str]:
    """A fresh SandboxClass name; its containers removed at the end."""
    name = f"docker-{secrets.token_hex(4)}"
    yield name
    for container in await engine.containers.list(all=True, filters={"label": [f"{CLASS_LABEL}={name}"]}):
        await container.delete(force=True)


def _classes(name: str, host: str) -> dict[str, Any]:
    """The SandboxClass index as kopf hands it: name -> [(spec, annotations)]."""
    return {name: [({"type": "docker", "docker": {"host": host, "image": SANDBOX_IMAGE}}, {})]}


def _body(class_name: str) -> dict[str, Any]:
    tenant = f"ws-{secrets.token_hex(4)}"
    # Idle past 30 min: the hour-old lastActivityTime below is, a pass within the test's
    # run after a create or resume is not (a 1 s timeout let a slow resume count as idle).
    spec = {"tenantId": tenant, "reclaimPolicy": "Delete",
            "sandbox": {"sandboxClassName": class_name, "idleTimeout": "30m"}}  # fmt: skip
    metadata = {"name": "files", "namespace": "t-stale", "uid": secrets.token_hex(8), "generation": 1}
    return {"metadata": metadata, "spec": spec}


async def _sandbox_pass(runtime: Runtime, body: dict[str, Any], classes: dict[str, Any]) -> dict[str, Any]:
    """The sandbox step on *body*, as a resync pass or a reconcile cycle runs it; returns
    the status it writes."""
    ctx = steps.context(runtime, body, LOG)
    await steps.run_step(ctx, "sandbox", classes)
    return ctx.status_patch()


def _stored(body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """*body* once *status* (a merge patch of the status) is written: a newer body."""
    newer = copy.deepcopy(body)
    old = newer.get("status") or {}
    newer["status"] = {**old, **status, "sandbox": {**(old.get("sandbox") or {}), **status.get("sandbox", {})}}
    return newer


async def _running(engine: aiodocker.Docker, ref: str) -> bool:
    container = await engine.containers.get(ref)
    return bool((await container.show())["State"]["Running"])


def _ready_reason(status: dict[str, Any]) -> str:
    return next(str(c["reason"]) for c in status["conditions"] if c["type"] == SANDBOX_READY)


async def test_a_cycle_on_the_body_from_before_an_idle_suspend_does_not_take_it_back(
    engine: aiodocker.Docker, podman_socket: str, class_name: str, new_runtime: Callable[[], Runtime]
) -> None:
    classes = _classes(class_name, podman_socket)
    made = _body(class_name)
    created = await _sandbox_pass(new_runtime(), made, classes)  # an earlier operator process made it
    ref = created["sandbox"]["ref"]
    assert created["sandbox"]["state"] == "Running"
    assert await _running(engine, ref)
    # As stored now, idle for an hour (the operator restarted meanwhile: nothing recorded).
    idle = _stored(made, {**created, "sandbox": {**created["sandbox"], "lastActivityTime": AN_HOUR_AGO}})
    runtime = new_runtime()

    by_timer = await _sandbox_pass(runtime, idle, classes)  # the resync suspends it ...
    assert (by_timer["sandbox"]["state"], _ready_reason(by_timer)) == ("Suspended", "Suspended")
    assert not await _running(engine, ref)

    # ... and the update's next cycles still read *idle* (kopf's body lags the timer's write):
    # a cycle of another step writes the conditions list whole,
    other_step = steps.context(runtime, idle, LOG).status_patch()
    assert _ready_reason(other_step) == "Suspended"
    # and the sandbox step acts on, and writes, the state the timer left.
    by_cycle = await _sandbox_pass(runtime, idle, classes)
    assert (by_cycle["sandbox"]["state"], _ready_reason(by_cycle)) == ("Suspended", "Suspended")
    assert by_cycle["sandbox"]["lastActivityTime"] == by_timer["sandbox"]["lastActivityTime"]
    assert not await _running(engine, ref)


async def test_a_pass_on_the_body_from_before_a_resume_does_not_suspend_it_again(
    engine: aiodocker.Docker, podman_socket: str, class_name: str, new_runtime: Callable[[], Runtime]
) -> None:
    classes = _classes(class_name, podman_socket)
    made = _body(class_name)
    created = await _sandbox_pass(new_runtime(), made, classes)
    ref = created["sandbox"]["ref"]
    idle = _stored(made, {**created, "sandbox": {**created["sandbox"], "lastActivityTime": AN_HOUR_AGO}})
    runtime = new_runtime()
    suspended = _stored(idle, await _sandbox_pass(runtime, idle, classes))
    assert suspended["status"]["sandbox"]["state"] == "Suspended"
    assert not await _running(engine, ref)

    used = copy.deepcopy(suspended)  # someone uses the sandbox: activity newer than lastActivityTime
    used["metadata"]["annotations"] = {ACTIVITY_ANNOTATION: stamp(datetime.now(UTC))}
    resumed = await _sandbox_pass(runtime, used, classes)
    assert (resumed["sandbox"]["state"], _ready_reason(resumed)) == ("Running", "Provisioned")
    assert await _running(engine, ref)

    # A pass handed the body from before the resume (Suspended, an hour idle, no activity)
    # neither suspends the sandbox just resumed nor reports it suspended.
    stale = await _sandbox_pass(runtime, suspended, classes)
    assert (stale["sandbox"]["state"], _ready_reason(stale)) == ("Running", "Provisioned")
    assert await _running(engine, ref)
    # Nor does one handed the body from before the suspend (Running, an hour idle).
    older = await _sandbox_pass(runtime, idle, classes)
    assert (older["sandbox"]["state"], _ready_reason(older)) == ("Running", "Provisioned")
    assert await _running(engine, ref)
