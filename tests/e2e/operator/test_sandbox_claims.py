"""A `local` sandbox's PersistentVolumeClaim as SandboxReady reports it, against the real
API server (no volume binder runs here: a test marks a claim Bound through its status, as
kube-controller-manager's binder would): False, reason ClaimPending, while it is Pending —
the message naming the StorageClass it asks for and why it is not bound — and True once it
is Bound, or while it waits for its first consumer (a StorageClass whose volumeBindingMode
is WaitForFirstConsumer binds it when a Pod that mounts it is scheduled: nothing to wait for
before the workspace is Ready)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.e2e.operator.kubeobjects import (
    apply,
    bind_claim,
    condition,
    condition_reason_is,
    event_with,
    eventually,
    get,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.sandbox_cases import sandbox_class
from tests.fix_kube import KubeCluster

pytestmark = pytest.mark.usefixtures("operator")
PROVISIONER = "example.com/nowhere"  # no such provisioner runs: its claims stay Pending


def _storage_class(name: str, binding: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": PROVISIONER,
        "volumeBindingMode": binding,
    }


@pytest.fixture
async def names(kube: KubeCluster) -> AsyncIterator[dict[str, str]]:
    """Fresh names of a StorageClass and a SandboxClass (deleted at the end)."""
    made = {"storage": f"files-{secrets.token_hex(4)}", "class": f"local-{secrets.token_hex(4)}"}
    yield made
    await kube.akubectl("delete", "sandboxclass", made["class"], "--ignore-not-found")
    await kube.akubectl("delete", "storageclass", made["storage"], "--ignore-not-found")


async def _sandbox_ready(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    return condition(await get(kube, "memoryworkspace", name, namespace), "SandboxReady")


async def test_a_pending_claim_is_not_ready_and_says_why_until_it_binds(
    kube: KubeCluster, k8s_namespace: str, names: dict[str, str]
) -> None:
    storage = names["storage"]
    await apply(
        kube,
        sandbox_class(names["class"], "local", {"local": {"storageClassName": storage}}),
        workspace(k8s_namespace, "files", sandbox={"sandboxClassName": names["class"]}),
    )
    await wait_for(kube, condition_reason_is("SandboxReady", "ClaimPending"), "memoryworkspace/files", k8s_namespace)
    pending = await get(kube, "memoryworkspace", "files", k8s_namespace)
    says = condition(pending, "SandboxReady")["message"]
    assert "PersistentVolumeClaim files-sandbox is not bound" in says
    assert f"asks for StorageClass {storage!r}, which does not exist" in says
    assert (condition(pending, "Ready")["status"], pending["status"]["phase"]) == ("False", "Pending")
    assert (await event_with(kube, k8s_namespace, "files", "SandboxPending"))["type"] == "Normal"

    await apply(kube, _storage_class(storage, "Immediate"))  # the class appears; nothing provisions it

    async def waits_on_the_provisioner() -> str | None:
        message = str((await _sandbox_ready(kube, k8s_namespace, "files"))["message"])
        return message if PROVISIONER in message else None

    says = await eventually(waits_on_the_provisioner, seconds=30, what="the message names the provisioner")
    assert f"not bound yet (StorageClass {storage!r}, provisioner {PROVISIONER})" in says

    await bind_claim(kube, k8s_namespace, "files-sandbox")
    ready = await wait_ready(kube, k8s_namespace, "files", seconds=30)
    assert condition(ready, "SandboxReady")["reason"] == "Provisioned"
    assert "Bound" in condition(ready, "SandboxReady")["message"]
    await kube.akubectl("delete", "memoryworkspace", "files", "-n", k8s_namespace, "--timeout=60s")


async def test_a_claim_waiting_for_its_first_consumer_is_ready(
    kube: KubeCluster, k8s_namespace: str, names: dict[str, str]
) -> None:
    await apply(
        kube,
        _storage_class(names["storage"], "WaitForFirstConsumer"),
        sandbox_class(names["class"], "local", {"local": {"storageClassName": names["storage"]}}),
        workspace(k8s_namespace, "later", sandbox={"sandboxClassName": names["class"]}),
    )
    ready = await wait_ready(kube, k8s_namespace, "later", seconds=60)
    sandbox = condition(ready, "SandboxReady")
    assert sandbox["reason"] == "WaitingForFirstConsumer"
    assert "binds when the first Pod that mounts it is scheduled" in sandbox["message"]
    assert (await get(kube, "pvc", "later-sandbox", k8s_namespace))["status"]["phase"] == "Pending"
    await kube.akubectl("delete", "memoryworkspace", "later", "-n", k8s_namespace, "--timeout=60s")
