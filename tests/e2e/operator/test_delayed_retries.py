"""A step that waits for its retry is retried after its own delay, not at the resync timer's
next pass: an operator process whose resync interval (600 s) is longer than every wait here
takes a workspace to Ready within seconds of what its sandbox waited for coming by itself —
a `local` sandbox's PersistentVolumeClaim bound (through its status, as the volume binder
would), a `pod` sandbox's Pod Ready (through its status, as a kubelet would). Nothing is
edited meanwhile: the only wake-up is the operator's own, after the step's delay.

(Seen on a real node, resync 3600 s: one retry logged "retrying in 1 s", then nothing until
the timer — kopf's retry waits for a watch event that a cycle changing nothing never causes.)"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from memplane_operator.backends.pod import WAITING_REASON, name_prefix
from tests.e2e.operator.kubeobjects import (
    apply,
    bind_claim,
    condition,
    condition_reason_is,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.sandbox_cases import sandbox_class
from tests.fix_kube import KubeCluster

pytestmark = pytest.mark.usefixtures("slow_operator")
RETRIED_SECONDS = 60  # the step's backoff is 1-4 s when the wait ends here; the resync is 600 s
PROVISIONER = "example.com/nowhere"  # no such provisioner runs: a claim stays Pending until the test binds it
IMAGE = "registry.example/memplane-sandbox:1"  # never pulled: no kubelet


@pytest.fixture
async def names(kube: KubeCluster) -> AsyncIterator[dict[str, str]]:
    """Fresh names of a StorageClass and a SandboxClass (deleted at the end)."""
    made = {"storage": f"files-{secrets.token_hex(4)}", "class": f"later-{secrets.token_hex(4)}"}
    yield made
    await kube.akubectl("delete", "sandboxclass", made["class"], "--ignore-not-found")
    await kube.akubectl("delete", "storageclass", made["storage"], "--ignore-not-found")


async def test_a_claim_bound_after_a_retry_was_scheduled_is_seen_after_that_retry(
    kube: KubeCluster, own_namespace: str, names: dict[str, str]
) -> None:
    storage: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": names["storage"]},
        "provisioner": PROVISIONER,
        "volumeBindingMode": "Immediate",
    }
    await apply(
        kube,
        storage,
        sandbox_class(names["class"], "local", {"local": {"storageClassName": names["storage"]}}),
        workspace(own_namespace, "files", sandbox={"sandboxClassName": names["class"]}),
    )
    await wait_for(kube, condition_reason_is("SandboxReady", "ClaimPending"), "memoryworkspace/files", own_namespace)
    await bind_claim(kube, own_namespace, "files-sandbox")  # the workspace itself is not touched
    ready = await wait_ready(kube, own_namespace, "files", seconds=RETRIED_SECONDS)
    assert condition(ready, "SandboxReady")["reason"] == "Provisioned"
    await kube.akubectl("delete", "memoryworkspace", "files", "-n", own_namespace, "--timeout=60s")


async def test_a_pod_ready_after_a_retry_was_scheduled_is_seen_after_that_retry(
    kube: KubeCluster, own_namespace: str, names: dict[str, str]
) -> None:
    manifest = workspace(own_namespace, "runs", sandbox={"sandboxClassName": names["class"]})
    await apply(kube, sandbox_class(names["class"], "pod", {"pod": {"image": IMAGE}}), manifest)
    await wait_for(kube, condition_reason_is("SandboxReady", WAITING_REASON), "memoryworkspace/runs", own_namespace)
    pod = name_prefix(names["class"]) + manifest["spec"]["tenantId"]
    ready_pod = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    await kube.akubectl(  # as a kubelet would (none runs here); the workspace itself is not touched
        "patch", "pod", pod, "-n", own_namespace, "--subresource=status", "--type=merge", "-p", json.dumps(ready_pod)
    )
    ready = await wait_ready(kube, own_namespace, "runs", seconds=RETRIED_SECONDS)
    assert condition(ready, "SandboxReady")["reason"] == "Provisioned"
    assert ready["status"]["sandbox"]["state"] == "Running"
    await kube.akubectl("delete", "memoryworkspace", "runs", "-n", own_namespace, "--timeout=60s")
