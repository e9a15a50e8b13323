"""The operator's file sync (memplane_operator.sync.passes) end to end on SandboxClass type
docker: the real API server, the in-process operator (as its ServiceAccount), real Podman
behind its Docker API socket and the real `memplane serve` process. A MemoryWorkspace with
`spec.sandbox.syncInterval: 1s` gets its memories rendered into its container's Memory/
and the edits made there taken back with its own key; the container's files are read and
written through the real docker backend, the memories over gRPC."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import aiodocker
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.filesync.convert import memory_from_proto
from memplane.filesync.lock import sync_lock
from memplane.filesync.state import ERRORS_FILE
from memplane.mdview.names import file_name
from memplane.sandbox import SandboxFileNotFoundError, SandboxHandle
from memplane.sandbox.docker import DockerSandboxes
from memplane.v1 import memory_pb2
from memplane_operator.backends.docker import CLASS_LABEL, container_prefix
from memplane_operator.sandbox.backed import ACTIVITY_ANNOTATION
from memplane_operator.settings import OperatorSettings
from tests.e2e.operator.kubeobjects import (
    apply,
    condition,
    eventually,
    get,
    secret_env,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.sandbox_cases import patch_workspace, sandbox_class, state_is, synced_is
from tests.fix_kube import KubeCluster
from tests.fix_podman import SANDBOX_IMAGE, podman_socket
from tests.fix_process import Services

__all__ = ["podman_socket"]  # the session fixture, visible to the tests here

pytestmark = pytest.mark.usefixtures("operator")
NOWHERE = "127.0.0.1:1"  # nothing listens: connection refused


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Box:
    """A synced MemoryWorkspace: its name, its container (through the engine and the docker
    backend) and a client with its own key."""

    name: str
    engine: aiodocker.Docker
    backend: DockerSandboxes
    handle: SandboxHandle
    client: AsyncMemplaneClient

    async def read(self, path: str) -> str | None:
        try:
            return (await self.backend.read_file(self.handle, path)).decode()
        except SandboxFileNotFoundError:
            return None

    async def add(self, content: str, name: str) -> tuple[memory_pb2.Memory, str]:
        """Store a memory over gRPC; it and the path of its file."""
        item = memory_pb2.MemoryInput(content=content, name=name, type=memory_pb2.MEMORY_TYPE_USER)
        memory = (await self.client.add_memories([item]))[0]
        return memory, f"Memory/{file_name(memory_from_proto(memory))}"


@pytest.fixture
async def docker_class(kube: KubeCluster, podman_socket: str) -> AsyncIterator[str]:
    name = f"sync-{secrets.token_hex(4)}"
    await apply(kube, sandbox_class(name, "docker", {"docker": {"host": podman_socket, "image": SANDBOX_IMAGE}}))
    yield name
    await kube.akubectl("delete", "sandboxclass", name, "--ignore-not-found")
    async with aiodocker.Docker(url=podman_socket) as engine:
        for container in await engine.containers.list(all=True, filters={"label": [f"{CLASS_LABEL}={name}"]}):
            await container.delete(force=True)


Boxes = Callable[..., Awaitable[Box]]


@pytest.fixture
async def boxes(
    kube: KubeCluster, k8s_namespace: str, docker_class: str, podman_socket: str, services: Services
) -> AsyncIterator[Boxes]:
    """Make a MemoryWorkspace synced every second in the docker class; wait until a first
    pass has been reported. Deleted at the end (reclaimPolicy Delete: its container too)."""
    made: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(_delete, kube, k8s_namespace, made)
        engine = await stack.enter_async_context(aiodocker.Docker(url=podman_socket))
        backend = DockerSandboxes(
            engine, SANDBOX_IMAGE, name_prefix=container_prefix(docker_class), labels={CLASS_LABEL: docker_class}
        )

        async def make(name: str, **sandbox: str) -> Box:
            sandbox = {"sandboxClassName": docker_class, "syncInterval": "1s", **sandbox}
            manifest = workspace(k8s_namespace, name, sandbox=sandbox)
            await apply(kube, manifest)
            made.append(name)
            ready = await wait_ready(kube, k8s_namespace, name)
            await wait_for(kube, synced_is("Synced"), f"memoryworkspace/{name}", k8s_namespace)
            key = (await secret_env(kube, k8s_namespace, ready["status"]["secretName"]))["MEMPLANE_API_KEY"]
            client = await stack.enter_async_context(AsyncMemplaneClient(services.target, key))
            sandbox = ready["status"]["sandbox"]
            handle = SandboxHandle("docker", manifest["spec"]["tenantId"], sandbox["ref"], sandbox["root"])
            return Box(name, engine, backend, handle, client)

        yield make


async def test_a_memory_added_over_grpc_appears_in_the_container_and_the_syncs_writes_are_not_activity(
    kube: KubeCluster, k8s_namespace: str, boxes: Boxes
) -> None:
    box = await boxes("sees")
    first = await get(kube, "memoryworkspace", "sees", k8s_namespace)
    created = first["status"]["sandbox"]["lastActivityTime"]
    assert condition(first, "SandboxSynced")["status"] == "True"
    assert (await box.read("Memory/MEMORY.md")) is not None  # the first pass rendered the (empty) view

    memory, path = await box.add("Alice prefers window seats on long flights", "Seats")
    text = await eventually(lambda: box.read(path), what=f"{path} in the container")
    assert "Alice prefers window seats on long flights" in text
    assert f"memplane_id: {memory.id}" in text
    assert path.removeprefix("Memory/") in (await box.read("Memory/MEMORY.md") or "")
    seen = stamp(datetime.now(UTC))

    async def reported_after() -> dict[str, object] | None:
        obj = await get(kube, "memoryworkspace", "sees", k8s_namespace)
        return obj if obj["status"]["sandbox"].get("lastSyncTime", "") > seen else None

    later = await eventually(reported_after, what="a pass reported after the file was written")
    assert later["status"]["sandbox"]["lastActivityTime"] == created  # the sync's own writes are no activity
    assert condition(later, "SandboxSynced")["reason"] == "Synced"
    assert condition(later, "Ready")["status"] == "True"


async def test_an_edit_in_the_container_reaches_its_workspace_only_and_counts_as_activity(
    kube: KubeCluster, k8s_namespace: str, boxes: Boxes
) -> None:
    box, other = await boxes("edits"), await boxes("stranger")
    memory, path = await box.add("Bob takes the 7:15 train to the office", "Commute")
    text = await eventually(lambda: box.read(path), what=f"{path} in the container")
    before = (await get(kube, "memoryworkspace", "edits", k8s_namespace))["status"]["sandbox"]["lastActivityTime"]
    await eventually(lambda: _true_if(stamp(datetime.now(UTC)) > before), what="a second after the last activity")

    edited = text.replace("Bob takes the 7:15 train to the office", "Bob now cycles to the office along the canal")
    await box.backend.write_file(box.handle, path, edited.encode())  # as an agent's Write tool would

    async def found() -> bool | None:
        hits = (await box.client.search("cycles along the canal", top_k=3)).hits
        return True if hits and "canal" in hits[0].memory.content else None

    await eventually(found, what="the edit found by SearchMemories of its workspace")
    hits = (await box.client.search("cycles along the canal", top_k=3)).hits
    assert hits[0].memory.id == memory.id  # the memory updated, not a new one
    stored = await box.client.get_memory(memory.id)
    assert (stored.content, stored.version) == ("Bob now cycles to the office along the canal", 2)
    assert dict(stored.metadata)["synced_by"] == "file-sync"
    foreign = (await other.client.search("cycles along the canal", top_k=10)).hits
    assert memory.id not in {h.memory.id for h in foreign}

    async def active() -> str | None:
        obj = await get(kube, "memoryworkspace", "edits", k8s_namespace)
        moved = obj["status"]["sandbox"]["lastActivityTime"]
        return moved if moved > before else None

    assert await eventually(active, what="lastActivityTime moved by the edit") > before


async def test_a_malformed_file_is_reported_in_the_condition_and_the_errors_note(
    kube: KubeCluster, k8s_namespace: str, boxes: Boxes
) -> None:
    box = await boxes("malformed")
    await box.backend.write_file(box.handle, "Memory/notes.md", b"just a line, no frontmatter\n")
    await wait_for(kube, synced_is("SyncedWithProblems"), "memoryworkspace/malformed", k8s_namespace)
    obj = await get(kube, "memoryworkspace", "malformed", k8s_namespace)
    synced = condition(obj, "SandboxSynced")
    assert synced["status"] == "True"
    assert "Memory/notes.md: has no frontmatter" in synced["message"]
    assert ERRORS_FILE in synced["message"]
    assert "Memory/notes.md" in (await box.read(ERRORS_FILE) or "")
    assert await box.read("Memory/notes.md") == "just a line, no frontmatter\n"  # left as it is

    fixed = b"---\nname: Parking\ndescription: where Carol parks\ntype: user\n---\nCarol parks on level 2\n"
    await box.backend.write_file(box.handle, "Memory/notes.md", fixed)
    await wait_for(kube, synced_is("Synced"), "memoryworkspace/malformed", k8s_namespace)
    assert await box.read(ERRORS_FILE) is None
    hits = (await box.client.search("where does Carol park", top_k=3)).hits
    assert hits
    assert hits[0].memory.content == "Carol parks on level 2"


async def test_services_out_of_reach_are_a_condition_retried_until_they_answer(
    kube: KubeCluster, k8s_namespace: str, boxes: Boxes, live_operator_settings: OperatorSettings
) -> None:
    box = await boxes("reach")
    live_operator_settings.sandbox_sync_target = NOWHERE
    try:
        await wait_for(kube, synced_is("ServiceUnavailable"), "memoryworkspace/reach", k8s_namespace)
        obj = await get(kube, "memoryworkspace", "reach", k8s_namespace)
        assert condition(obj, "SandboxSynced")["status"] == "False"
        assert "the memplane services are unreachable" in condition(obj, "SandboxSynced")["message"]
        assert condition(obj, "Ready")["status"] == "True"  # the sync is no part of Ready
        memory, path = await box.add("Dana reviews pull requests before lunch", "Reviews")
    finally:
        live_operator_settings.sandbox_sync_target = ""
    await wait_for(kube, synced_is("Synced"), "memoryworkspace/reach", k8s_namespace)
    text = await eventually(lambda: box.read(path), what=f"{path} after the services answered again")
    assert f"memplane_id: {memory.id}" in text


async def test_a_suspended_sandbox_is_neither_synced_nor_woken_and_is_synced_once_resumed(
    kube: KubeCluster, k8s_namespace: str, boxes: Boxes
) -> None:
    clock = await boxes("clock")  # synced every second: its passes show time passing for the other
    box = await boxes("sleeper")
    await patch_workspace(kube, k8s_namespace, "sleeper", {"spec": {"sandbox": {"idleTimeout": "1s"}}})
    await wait_for(kube, state_is("Suspended"), "memoryworkspace/sleeper", k8s_namespace)
    asleep = await get(kube, "memoryworkspace", "sleeper", k8s_namespace)
    memory, path = await box.add("Frank waters the plants on Thursdays", "Plants")

    await passes_of(kube, k8s_namespace, "clock", 3)
    still = await get(kube, "memoryworkspace", "sleeper", k8s_namespace)
    assert still["status"]["sandbox"]["state"] == "Suspended"
    assert still["status"]["sandbox"].get("lastSyncTime") == asleep["status"]["sandbox"].get("lastSyncTime")
    container = box.engine.containers.container(box.handle.ref)
    assert (await container.show())["State"]["Running"] is False  # not woken by the sync
    with pytest.raises(aiodocker.DockerError) as absent:  # the archive API reads a stopped container
        await container.get_archive(f"{box.handle.root}/{path}")
    assert absent.value.status == 404
    assert clock.name == "clock"

    used = stamp(datetime.now(UTC))
    await patch_workspace(
        kube, k8s_namespace, "sleeper",
        {"metadata": {"annotations": {ACTIVITY_ANNOTATION: used}}, "spec": {"sandbox": {"idleTimeout": "1h"}}},
    )  # fmt: skip
    await wait_for(kube, state_is("Running"), "memoryworkspace/sleeper", k8s_namespace)
    text = await eventually(lambda: box.read(path), what=f"{path} once the sandbox runs again")
    assert f"memplane_id: {memory.id}" in text


async def test_no_idle_suspend_while_a_pass_is_in_the_sandbox(
    kube: KubeCluster, k8s_namespace: str, boxes: Boxes
) -> None:
    await boxes("ticks")  # synced every second: its passes show time passing for the other
    box = await boxes("busy")
    # The lock held here makes the next pass of "busy" wait (up to 60 s, the operator's lock
    # wait): everything below must happen within that, so it waits on a few events only.
    async with sync_lock(box.backend, box.handle, wait_seconds=30):
        await passes_of(kube, k8s_namespace, "ticks", 2)  # meanwhile a pass of "busy" began and waits
        held = (await get(kube, "memoryworkspace", "busy", k8s_namespace))["status"]["sandbox"]["lastSyncTime"]
        await patch_workspace(kube, k8s_namespace, "busy", {"spec": {"sandbox": {"idleTimeout": "1s"}}})
        generation = (await get(kube, "memoryworkspace", "busy", k8s_namespace))["metadata"]["generation"]
        reconciled = f"jsonpath={{.status.conditions[?(@.type=='SandboxReady')].observedGeneration}}={generation}"
        await wait_for(kube, reconciled, "memoryworkspace/busy", k8s_namespace)  # the idle timeout was looked at
        await passes_of(kube, k8s_namespace, "ticks", 1)  # and a resync or more since
        still = await get(kube, "memoryworkspace", "busy", k8s_namespace)
        assert still["status"]["sandbox"]["state"] == "Running"  # idle, but a pass is in the sandbox
        assert still["status"]["sandbox"]["lastSyncTime"] == held  # that pass still waits: in flight
    await wait_for(kube, state_is("Suspended"), "memoryworkspace/busy", k8s_namespace)  # once it is done


async def passes_of(kube: KubeCluster, namespace: str, name: str, count: int) -> None:
    """Wait for *count* more sync passes of the MemoryWorkspace *name* (its lastSyncTime
    taking *count* new values): a clock made of the operator's own work."""
    seen: set[str] = set()

    async def counted() -> bool | None:
        obj = await get(kube, "memoryworkspace", name, namespace)
        seen.add(obj["status"]["sandbox"]["lastSyncTime"])
        return True if len(seen) > count else None

    await eventually(counted, what=f"{count} sync passes of {name}")


async def _delete(kube: KubeCluster, namespace: str, names: list[str]) -> None:
    if names:
        await kube.akubectl("delete", "memoryworkspace", *names, "-n", namespace, "--timeout=60s")


async def _true_if(value: bool) -> bool | None:
    return True if value else None
