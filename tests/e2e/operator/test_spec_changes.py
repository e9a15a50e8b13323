"""A changed spec is acted on at once, not at the resync timer's next pass: an operator
process whose resync interval (600 s) is longer than every wait here takes a fixed spec of
an object it could not provision (a SandboxClass that does not exist) to Ready in seconds,
and a spec changed while a step waits for its retry (a Pod sandbox that is not Ready) is
applied in seconds — every step again, for the new generation."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from tests.e2e.operator.kubeobjects import (
    apply,
    condition,
    condition_reason_is,
    eventually,
    get,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.sandbox_cases import sandbox_class
from tests.fix_kube import KubeCluster

AT_ONCE_SECONDS = 30  # an edit reaches the services and the status well within this (the resync: 600 s)


@pytest.fixture
async def classes(kube: KubeCluster) -> AsyncIterator[dict[str, str]]:
    """Two fresh SandboxClasses: "none" (type none) and "pod" (a Pod that never runs here:
    no kubelet), by role."""
    names = {"none": f"none-{secrets.token_hex(4)}", "pod": f"pod-{secrets.token_hex(4)}"}
    await apply(
        kube,
        sandbox_class(names["none"], "none", {}),
        sandbox_class(names["pod"], "pod", {"pod": {"image": "registry.example/memplane-sandbox:1"}}),
    )
    yield names
    await kube.akubectl("delete", "sandboxclass", *names.values(), "--ignore-not-found")


async def _edit(kube: KubeCluster, manifest: dict[str, Any], **spec: Any) -> None:
    manifest["spec"].update(spec)
    await apply(kube, manifest)


@pytest.mark.usefixtures("slow_operator")
async def test_a_fixed_spec_is_acted_on_at_once(kube: KubeCluster, own_namespace: str, classes: dict[str, str]) -> None:
    manifest = workspace(own_namespace, "fixme", sandbox={"sandboxClassName": f"absent-{secrets.token_hex(4)}"})
    await apply(kube, manifest)
    await wait_for(
        kube, condition_reason_is("SandboxReady", "SandboxClassNotFound"), "memoryworkspace/fixme", own_namespace
    )
    stuck = await get(kube, "memoryworkspace", "fixme", own_namespace)
    assert stuck["status"]["phase"] == "Failed"  # only a person can fix it ...
    await _edit(kube, manifest, sandbox={"sandboxClassName": classes["none"]})  # ... and does
    ready = await wait_ready(kube, own_namespace, "fixme", seconds=AT_ONCE_SECONDS)
    assert ready["status"]["observedGeneration"] == ready["metadata"]["generation"] == 2


@pytest.mark.usefixtures("slow_operator")
async def test_a_spec_changed_while_a_step_waits_is_applied_at_once(
    kube: KubeCluster, own_namespace: str, classes: dict[str, str], services_admin: AsyncMemplaneClient
) -> None:
    manifest = workspace(
        own_namespace, "moving", quotas={"maxMemories": 10}, sandbox={"sandboxClassName": classes["pod"]}
    )
    tenant = manifest["spec"]["tenantId"]
    await apply(kube, manifest)
    await wait_for(kube, condition_reason_is("SandboxReady", "PodNotReady"), "memoryworkspace/moving", own_namespace)
    waiting = await get(kube, "memoryworkspace", "moving", own_namespace)
    assert waiting["status"]["phase"] == "Pending"  # waiting for what will come (the Pod)
    assert (await services_admin.get_workspace(tenant)).quotas.max_memories == 10

    await _edit(kube, manifest, quotas={"maxMemories": 20})  # while the sandbox step waits for its retry

    async def applied() -> bool | None:
        return True if (await services_admin.get_workspace(tenant)).quotas.max_memories == 20 else None

    await eventually(applied, seconds=AT_ONCE_SECONDS, what="the new quota reaches the services")
    await wait_for(kube, "jsonpath={.status.observedGeneration}=2", "memoryworkspace/moving", own_namespace)
    await _edit(kube, manifest, sandbox={"sandboxClassName": classes["none"]})  # the Pod given up
    ready = await wait_ready(kube, own_namespace, "moving", seconds=AT_ONCE_SECONDS)
    assert condition(ready, "SandboxReady")["reason"] == "NoSandbox"
