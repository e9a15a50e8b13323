"""SandboxClass type docker end to end: `kubectl apply` of a SandboxClass and a
MemoryWorkspace against the real API server, the real operator (in-process, as its
ServiceAccount) and real Podman behind its Docker-compatible socket (tests/fix_podman.py):
the container is made and recorded in status.sandbox, suspended when idle and resumed on
activity with its files, destroyed or kept by reclaimPolicy (at deletion and when the
workspace moves to another class), adopted after a crash between create and status write,
and a bad parameter is a condition naming the field."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiodocker
import pytest

from memplane.sandbox.docker import DockerSandboxes
from memplane_operator.backend_docker import CLASS_LABEL, container_prefix
from memplane_operator.sandbox_backed import ACTIVITY_ANNOTATION
from tests.e2e.operator.kubeobjects import apply, condition, example, get, wait_for, wait_ready, workspace
from tests.fix_kube import KubeCluster
from tests.fix_podman import SANDBOX_IMAGE, podman_socket

__all__ = ["podman_socket"]  # the session fixture, visible to the tests here

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
async def engine(podman_socket: str) -> AsyncIterator[aiodocker.Docker]:
    """A client of the Podman socket the SandboxClasses point at."""
    docker = aiodocker.Docker(url=podman_socket)
    try:
        yield docker
    finally:
        await docker.close()


@pytest.fixture
async def docker_class(kube: KubeCluster, podman_socket: str, engine: aiodocker.Docker) -> AsyncIterator[str]:
    """A docker SandboxClass on the Podman socket (a fresh name); deleted at the end with
    every container it left."""
    name = f"docker-{secrets.token_hex(4)}"
    await apply(kube, _class(name, podman_socket))
    yield name
    await kube.akubectl("delete", "sandboxclass", name, "--ignore-not-found")
    for container in await engine.containers.list(all=True, filters={"label": [f"{CLASS_LABEL}={name}"]}):
        await container.delete(force=True)


def _class(name: str, host: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "SandboxClass",
        "metadata": {"name": name},
        "spec": {"type": "docker", "docker": {"host": host, "image": SANDBOX_IMAGE}, **spec},
    }


async def _containers(engine: aiodocker.Docker, tenant: str) -> list[dict[str, Any]]:
    """What the engine holds for *tenant*: id, name, running, labels of each container."""
    found = []
    for container in await engine.containers.list(all=True, filters={"label": [f"memplane.io/workspace={tenant}"]}):
        shown = await container.show()
        found.append(
            {
                "id": shown["Id"],
                "name": shown["Name"].lstrip("/"),
                "running": shown["State"]["Running"],
                "labels": shown["Config"]["Labels"],
            }
        )
    return found


async def _read(engine: aiodocker.Docker, ref: str, path: str) -> bytes:
    archive = await engine.containers.container(ref).get_archive(path)
    with archive:
        member = archive.next()
        assert member is not None
        data = archive.extractfile(member)
        assert data is not None
        return data.read()


async def _write(engine: aiodocker.Docker, ref: str, name: str, data: bytes) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    await engine.containers.container(ref).put_archive("/sandbox", buffer.getvalue())  # type: ignore[no-untyped-call]


async def _patch(kube: KubeCluster, namespace: str, name: str, patch: dict[str, Any]) -> None:
    await kube.akubectl("patch", "memoryworkspace", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def _state_is(state: str) -> str:
    return f"jsonpath={{.status.sandbox.state}}={state}"


async def test_the_container_is_made_suspended_when_idle_and_resumed_on_activity_with_its_files(
    kube: KubeCluster, k8s_namespace: str, docker_class: str, engine: aiodocker.Docker
) -> None:
    manifest = workspace(k8s_namespace, "files", sandbox={"sandboxClassName": docker_class})
    tenant = manifest["spec"]["tenantId"]
    await apply(kube, manifest)
    ready = await wait_ready(kube, k8s_namespace, "files")
    sandbox = ready["status"]["sandbox"]
    assert {k: sandbox[k] for k in ("className", "type", "root", "state")} == {
        "className": docker_class,
        "type": "docker",
        "root": "/sandbox",
        "state": "Running",
    }
    assert condition(ready, "SandboxReady")["reason"] == "Provisioned"
    [container] = await _containers(engine, tenant)
    assert container["id"] == sandbox["ref"]
    assert container["name"] == container_prefix(docker_class) + tenant
    assert container["running"]
    assert container["labels"][CLASS_LABEL] == docker_class
    await _write(engine, sandbox["ref"], "note.md", b"kept while suspended")

    await _patch(kube, k8s_namespace, "files", {"spec": {"sandbox": {"idleTimeout": "1s"}}})
    await wait_for(kube, _state_is("Suspended"), "memoryworkspace/files", k8s_namespace)
    suspended = await get(kube, "memoryworkspace", "files", k8s_namespace)
    assert condition(suspended, "SandboxReady")["reason"] == "Suspended"
    assert condition(suspended, "Ready")["status"] == "True"  # suspended is the state asked for
    [container] = await _containers(engine, tenant)
    assert (container["id"], container["running"]) == (sandbox["ref"], False)

    used = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await _patch(
        kube,
        k8s_namespace,
        "files",
        {"metadata": {"annotations": {ACTIVITY_ANNOTATION: used}}, "spec": {"sandbox": {"idleTimeout": "1h"}}},
    )
    await wait_for(kube, _state_is("Running"), "memoryworkspace/files", k8s_namespace)
    resumed = await get(kube, "memoryworkspace", "files", k8s_namespace)
    assert resumed["status"]["sandbox"]["ref"] == sandbox["ref"]  # the same container, started again
    assert resumed["status"]["sandbox"]["lastActivityTime"] >= used
    [container] = await _containers(engine, tenant)
    assert container["running"]
    assert await _read(engine, sandbox["ref"], "/sandbox/note.md") == b"kept while suspended"


async def test_the_sandbox_class_idle_timeout_applies_to_workspaces_without_one(
    kube: KubeCluster, k8s_namespace: str, podman_socket: str, docker_class: str, engine: aiodocker.Docker
) -> None:
    await apply(kube, _class(docker_class, podman_socket, idleTimeout="1s"))
    manifest = workspace(k8s_namespace, "idle", sandbox={"sandboxClassName": docker_class})
    await apply(kube, manifest)
    await wait_for(kube, _state_is("Suspended"), "memoryworkspace/idle", k8s_namespace)
    [container] = await _containers(engine, manifest["spec"]["tenantId"])
    assert not container["running"]


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
async def test_reclaim_policy_decides_the_container_at_deletion(
    policy: str, kube: KubeCluster, k8s_namespace: str, docker_class: str, engine: aiodocker.Docker
) -> None:
    manifest = workspace(k8s_namespace, "gone", sandbox={"sandboxClassName": docker_class}, reclaimPolicy=policy)
    tenant = manifest["spec"]["tenantId"]
    await apply(kube, manifest)
    ref = (await wait_ready(kube, k8s_namespace, "gone"))["status"]["sandbox"]["ref"]
    await kube.akubectl("delete", "memoryworkspace", "gone", "-n", k8s_namespace, "--timeout=60s")
    left = await _containers(engine, tenant)
    if policy == "Delete":
        assert left == []
    else:
        assert [(c["id"], c["running"]) for c in left] == [(ref, False)]  # kept, stopped


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
async def test_moving_to_another_class_releases_the_old_sandbox_by_reclaim_policy(
    policy: str,
    kube: KubeCluster,
    k8s_namespace: str,
    podman_socket: str,
    docker_class: str,
    engine: aiodocker.Docker,
) -> None:
    other = f"{docker_class}-b"
    await apply(kube, _class(other, podman_socket))
    try:
        manifest = workspace(k8s_namespace, "moves", sandbox={"sandboxClassName": docker_class}, reclaimPolicy=policy)
        tenant = manifest["spec"]["tenantId"]
        await apply(kube, manifest)
        old = (await wait_ready(kube, k8s_namespace, "moves"))["status"]["sandbox"]["ref"]
        await _patch(kube, k8s_namespace, "moves", {"spec": {"sandbox": {"sandboxClassName": other}}})
        await wait_for(kube, f"jsonpath={{.status.sandbox.className}}={other}", "memoryworkspace/moves", k8s_namespace)
        moved = await wait_ready(kube, k8s_namespace, "moves")
        new = moved["status"]["sandbox"]["ref"]
        held = {c["id"]: (c["labels"][CLASS_LABEL], c["running"]) for c in await _containers(engine, tenant)}
        expected = {new: (other, True)}
        if policy == "Retain":
            expected[old] = (docker_class, False)
        assert held == expected
    finally:
        await kube.akubectl("delete", "memoryworkspace", "moves", "-n", k8s_namespace, "--timeout=60s")
        await kube.akubectl("delete", "sandboxclass", other)
        for container in await engine.containers.list(all=True, filters={"label": [f"{CLASS_LABEL}={other}"]}):
            await container.delete(force=True)


async def test_deletion_waits_for_an_unreachable_engine_then_destroys(
    kube: KubeCluster, k8s_namespace: str, podman_socket: str, docker_class: str, engine: aiodocker.Docker
) -> None:
    manifest = workspace(k8s_namespace, "wait", sandbox={"sandboxClassName": docker_class})
    tenant = manifest["spec"]["tenantId"]
    await apply(kube, manifest)
    await wait_ready(kube, k8s_namespace, "wait")
    await apply(kube, _class(docker_class, "unix:///nonexistent/podman.sock"))  # the engine goes away
    await kube.akubectl("delete", "memoryworkspace", "wait", "-n", k8s_namespace, "--wait=false")
    await wait_for(kube, "jsonpath={.status.phase}=Deleting", "memoryworkspace/wait", k8s_namespace)
    held = await get(kube, "memoryworkspace", "wait", k8s_namespace)
    assert "waiting for the sandbox backend" in condition(held, "Ready")["message"]
    assert len(await _containers(engine, tenant)) == 1  # still there: nothing reached it
    await apply(kube, _class(docker_class, podman_socket))  # back: the retried finalizer destroys it
    await wait_for(kube, "delete", "memoryworkspace/wait", k8s_namespace)
    assert await _containers(engine, tenant) == []


async def test_a_container_made_before_a_crash_is_adopted_not_duplicated(
    kube: KubeCluster, k8s_namespace: str, docker_class: str, engine: aiodocker.Docker
) -> None:
    manifest = workspace(k8s_namespace, "adopt", sandbox={"sandboxClassName": docker_class})
    tenant = manifest["spec"]["tenantId"]
    # What a reconcile cut short after the engine's create leaves: the container, no status.
    made = DockerSandboxes(
        engine, SANDBOX_IMAGE, name_prefix=container_prefix(docker_class), labels={CLASS_LABEL: docker_class}
    )
    handle = await made.ensure(tenant)
    await apply(kube, manifest)
    ready = await wait_ready(kube, k8s_namespace, "adopt")
    assert ready["status"]["sandbox"]["ref"] == handle.ref
    assert [c["id"] for c in await _containers(engine, tenant)] == [handle.ref]


async def test_bad_parameters_and_an_unreachable_engine_are_conditions(
    kube: KubeCluster, k8s_namespace: str, docker_class: str
) -> None:
    bad, away = f"{docker_class}-ftp", f"{docker_class}-away"
    await apply(kube, _class(bad, "ftp://docker.example"), _class(away, "unix:///nonexistent/podman.sock"))
    try:
        await apply(
            kube,
            workspace(k8s_namespace, "bad", sandbox={"sandboxClassName": bad}),
            workspace(k8s_namespace, "away", sandbox={"sandboxClassName": away}),
        )
        for name, reason, says in (
            ("bad", "InvalidParameters", "spec.docker.host: 'ftp://docker.example' must start with one of unix://"),
            ("away", "BackendUnavailable", "Cannot connect to Docker Engine via unix:///nonexistent/podman.sock"),
        ):
            await wait_for(
                kube, f"jsonpath={{.status.conditions[?(@.type=='SandboxReady')].reason}}={reason}",
                f"memoryworkspace/{name}", k8s_namespace,
            )  # fmt: skip
            obj = await get(kube, "memoryworkspace", name, k8s_namespace)
            assert says in condition(obj, "SandboxReady")["message"]
            assert condition(obj, "Ready")["status"] == "False"
            assert condition(obj, "DatabaseReady")["status"] == "True"  # the rest is provisioned
        assert (await get(kube, "memoryworkspace", "bad", k8s_namespace))["status"]["phase"] == "Failed"
        assert (await get(kube, "memoryworkspace", "away", k8s_namespace))["status"]["phase"] == "Provisioning"
    finally:
        for name in ("bad", "away"):
            await kube.akubectl("delete", "memoryworkspace", name, "-n", k8s_namespace, "--timeout=60s")
        await kube.akubectl("delete", "sandboxclass", bad, away)


async def test_the_docker_example_is_a_class_the_api_server_takes(kube: KubeCluster) -> None:
    sample = example("sandboxclass-docker.yaml")
    assert sample["spec"]["type"] == "docker"
    await kube.akubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(sample))
