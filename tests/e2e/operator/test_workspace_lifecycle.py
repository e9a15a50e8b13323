"""A MemoryWorkspace's life against a real API server, with the operator as a ServiceAccount
holding only the repository's ClusterRole and the services as a real process: apply ->
Ready -> the Secret works (for that workspace only) -> a quota change reaches the services
-> delete under each reclaimPolicy; duplicate tenantIds; rotation; drift."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError, PermissionDeniedError, QuotaExceededError, UnauthenticatedError
from memplane.v1 import admin_pb2, memory_pb2
from tests.e2e.operator.kubeobjects import (
    apply,
    bind_claim,
    condition,
    condition_reason_is,
    event_with,
    eventually,
    example,
    get,
    random_tenant,
    secret_env,
    wait_for,
    wait_ready,
    workspace,
)
from tests.fix_kube import KubeCluster, random_namespace_name

pytestmark = pytest.mark.usefixtures("operator")


def _memory(text: str) -> memory_pb2.MemoryInput:
    return memory_pb2.MemoryInput(content=text, scope=memory_pb2.Scope(user_id="alice"))


@pytest.fixture
async def readme_sandbox_class(kube: KubeCluster) -> AsyncIterator[dict[str, Any]]:
    """The SandboxClass of README.md#on-kubernetes (the cluster's default class), removed at the end: the
    workspaces of later tests would get its claims, which nothing binds here."""
    sandbox_class = example("sandboxclass-local.yaml")
    await apply(kube, sandbox_class)
    yield sandbox_class
    await kube.akubectl("delete", "sandboxclass", sandbox_class["metadata"]["name"], "--ignore-not-found")


@pytest.mark.usefixtures("readme_sandbox_class")
async def test_the_readme_sample_reaches_ready_and_its_secret_serves_that_workspace_only(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    sample = copy.deepcopy(example("memoryworkspace.yaml"))
    sample["metadata"]["namespace"] = k8s_namespace
    sample["spec"]["tenantId"] = tenant = random_tenant()
    sample["spec"]["reclaimPolicy"] = "Delete"
    await apply(kube, sample)
    # No StorageClass here, and no volume binder: the claim stays Pending, and says so ...
    target = "memoryworkspace/support-bot"
    await wait_for(kube, condition_reason_is("SandboxReady", "ClaimPending"), target, k8s_namespace)
    pending = await get(kube, "memoryworkspace", "support-bot", k8s_namespace)
    says = condition(pending, "SandboxReady")["message"]
    assert "PersistentVolumeClaim support-bot-sandbox is not bound" in says
    assert "names no StorageClass and the cluster has no default one" in says
    assert (condition(pending, "Ready")["status"], pending["status"]["phase"]) == ("False", "Pending")
    assert pending["status"]["observedGeneration"] == 1  # from the first status write, Ready or not
    await bind_claim(kube, k8s_namespace, "support-bot-sandbox")  # ... until it binds
    ready = await wait_ready(kube, k8s_namespace, "support-bot")
    assert (await event_with(kube, k8s_namespace, "support-bot", "Ready"))["type"] == "Normal"
    assert ready["status"]["phase"] == "Ready"
    assert ready["status"]["observedGeneration"] == ready["metadata"]["generation"]
    for part in ("DatabaseReady", "CredentialsReady", "SandboxReady"):
        assert condition(ready, part)["status"] == "True"
        assert condition(ready, part)["observedGeneration"] == ready["metadata"]["generation"]
    assert ready["status"]["sandbox"] == {
        "className": "local-files",
        "type": "local",
        "claimName": "support-bot-sandbox",
    }
    claim = await get(kube, "pvc", "support-bot-sandbox", k8s_namespace)
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"

    env = await secret_env(kube, k8s_namespace, "support-bot-memplane")
    assert env["MEMPLANE_WORKSPACE"] == tenant
    stored = await services_admin.get_workspace(tenant)
    assert stored.quotas == admin_pb2.WorkspaceQuotas(
        max_memories=100000, max_bytes=2**30, max_requests_per_second=200, max_embedding_tokens_per_day=5000000
    )
    assert stored.retention.default_ttl.seconds == 365 * 86400
    other = await services_admin.create_workspace(random_tenant())
    other_key = await services_admin.create_api_key(other.name)
    try:
        async with AsyncMemplaneClient(env["MEMPLANE_TARGET"], other_key.api_key) as outsider:
            await outsider.add_memories([_memory("Alice's secret in another workspace")])
        async with AsyncMemplaneClient.from_env(env) as agent:
            [added] = await agent.add_memories([_memory("Alice moved to Lisbon in March")])
            hits = (await agent.search("where does alice live?", top_k=10)).hits
            assert [h.memory.content for h in hits] == [added.content]  # nothing of the other workspace
            with pytest.raises(PermissionDeniedError):
                await agent.list_workspaces()
    finally:
        await services_admin.delete_workspace(other.name)
    listed = (await kube.akubectl("get", "memoryworkspaces", "-n", k8s_namespace)).stdout.splitlines()
    assert listed[0].split() == ["NAME", "TENANT", "READY", "PHASE", "MEMORIES", "SECRET", "AGE"]
    assert listed[1].split()[:6] == [
        "support-bot",
        tenant,
        "True",
        "Ready",
        listed[1].split()[4],
        "support-bot-memplane",
    ]


async def test_a_quota_change_reaches_the_services(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    await apply(kube, workspace(k8s_namespace, "quota", quotas={"maxMemories": 2}))
    await wait_ready(kube, k8s_namespace, "quota")
    env = await secret_env(kube, k8s_namespace, "quota-memplane")
    async with AsyncMemplaneClient.from_env(env) as agent:
        await agent.add_memories([_memory("one"), _memory("two")])
        with pytest.raises(QuotaExceededError) as caught:
            await agent.add_memories([_memory("three")])
        assert (caught.value.quota_id, caught.value.limit) == ("max_memories", 2)
        await wait_for(kube, "condition=QuotaExceeded", "memoryworkspace/quota", k8s_namespace)
        assert (await event_with(kube, k8s_namespace, "quota", "QuotaExceeded"))["type"] == "Warning"
        await kube.akubectl(
            "patch", "memoryworkspace", "quota", "-n", k8s_namespace, "--type=merge",
            "-p", '{"spec": {"quotas": {"maxMemories": 3}}}',
        )  # fmt: skip
        await wait_for(kube, "jsonpath={.status.observedGeneration}=2", "memoryworkspace/quota", k8s_namespace)
        assert (await services_admin.get_workspace(env["MEMPLANE_WORKSPACE"])).quotas.max_memories == 3
        await agent.add_memories([_memory("three")])


async def test_spec_placement_names_the_database_cluster_and_an_unknown_one_is_refused_by_the_services(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    await apply(kube, workspace(k8s_namespace, "placed", placement="default"))  # the services' one cluster
    ready = await wait_ready(kube, k8s_namespace, "placed")
    assert ready["status"]["placement"] == "default"
    assert (await services_admin.get_workspace(ready["spec"]["tenantId"])).placement == "default"
    await apply(kube, workspace(k8s_namespace, "misplaced", placement="north"))
    target = "memoryworkspace/misplaced"
    await wait_for(kube, condition_reason_is("DatabaseReady", "RejectedByServices"), target, k8s_namespace)
    refused = await get(kube, "memoryworkspace", "misplaced", k8s_namespace)
    assert "placement" in condition(refused, "DatabaseReady")["message"]
    with pytest.raises(NotFoundError):  # nothing was created
        await services_admin.get_workspace(refused["spec"]["tenantId"])


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
async def test_reclaim_policy(
    policy: str, kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    manifest = workspace(k8s_namespace, "reclaim", reclaimPolicy=policy)
    tenant = manifest["spec"]["tenantId"]
    await apply(kube, manifest)
    await wait_ready(kube, k8s_namespace, "reclaim")
    env = await secret_env(kube, k8s_namespace, "reclaim-memplane")
    async with AsyncMemplaneClient.from_env(env) as agent:
        await agent.add_memories([_memory("kept or erased by the reclaim policy")])
    await kube.akubectl("delete", "memoryworkspace", "reclaim", "-n", k8s_namespace, "--timeout=60s")
    assert (await kube.akubectl("get", "secret", "reclaim-memplane", "-n", k8s_namespace, check=False)).returncode != 0
    if policy == "Delete":
        with pytest.raises(NotFoundError):
            await services_admin.get_workspace(tenant)
        return
    assert (await services_admin.get_workspace_usage(tenant)).memory_count == 1  # the data is retained
    async with AsyncMemplaneClient.from_env(env) as agent:
        with pytest.raises(UnauthenticatedError):  # ... but its keys are revoked
            await agent.list_memories()
    await apply(kube, workspace(k8s_namespace, "reclaim", tenant, reclaimPolicy="Delete"))  # the same object again
    await wait_ready(kube, k8s_namespace, "reclaim")
    async with AsyncMemplaneClient.from_env(await secret_env(kube, k8s_namespace, "reclaim-memplane")) as agent:
        assert (await agent.list_memories()).total_size == 1  # adopted


async def test_a_duplicate_tenant_id_is_conflict_and_changes_nothing_of_the_first(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    first = workspace(k8s_namespace, "first")
    tenant = first["spec"]["tenantId"]
    await apply(kube, first)
    await wait_ready(kube, k8s_namespace, "first")
    env = await secret_env(kube, k8s_namespace, "first-memplane")
    async with AsyncMemplaneClient.from_env(env) as agent:
        await agent.add_memories([_memory("the first tenant's memory")])
    keys_before = (await services_admin.list_api_keys(tenant)).api_keys
    other_namespace = random_namespace_name()
    await kube.akubectl("create", "namespace", other_namespace)
    try:
        await apply(kube, workspace(other_namespace, "second", tenant))  # reclaimPolicy Delete
        await wait_for(kube, "condition=Conflict", "memoryworkspace/second", other_namespace)
        second = await get(kube, "memoryworkspace", "second", other_namespace)
        # Created in a later second: DuplicateTenantId from the index; in the same second the
        # index cannot order them and the workspace's owner labels decide.
        assert condition(second, "Conflict")["reason"] in {"DuplicateTenantId", "WorkspaceOwnedElsewhere"}
        assert condition(second, "Ready")["status"] == "False"
        assert second["status"]["phase"] == "Failed"  # only a person can settle it
        warned = await event_with(kube, other_namespace, "second", "Conflict")
        assert warned["type"] == "Warning"
        for said in (
            condition(second, "Conflict")["message"],
            condition(second, "Ready")["message"],
            warned["message"],
        ):
            assert k8s_namespace not in said  # nothing of the other tenant: not its namespace ...
            assert "first" not in said  # ... nor its object's name
        missing = await kube.akubectl("get", "secret", "second-memplane", "-n", other_namespace, check=False)
        assert missing.returncode != 0  # no credentials for the conflicting object
        await kube.akubectl("delete", "memoryworkspace", "second", "-n", other_namespace, "--timeout=60s")
    finally:
        await kube.akubectl("delete", "namespace", other_namespace, "--wait=false")
    assert (await services_admin.list_api_keys(tenant)).api_keys == keys_before
    async with AsyncMemplaneClient.from_env(env) as agent:
        assert (await agent.list_memories()).total_size == 1
    assert condition(await get(kube, "memoryworkspace", "first", k8s_namespace), "Ready")["status"] == "True"


async def test_rotation_keeps_the_previous_key_for_its_grace_period_then_revokes_it(
    kube: KubeCluster, k8s_namespace: str
) -> None:
    await apply(kube, workspace(k8s_namespace, "rotate", credentials={"rotation": {"gracePeriod": "10s"}}))
    before = await wait_ready(kube, k8s_namespace, "rotate")
    old = await secret_env(kube, k8s_namespace, "rotate-memplane")
    await kube.akubectl("annotate", "memoryworkspace", "rotate", "-n", k8s_namespace, "memplane.io/rotate=first")
    old_key_id = before["status"]["keyId"]
    rotated = await eventually(
        lambda: _key_changed(kube, k8s_namespace, old_key_id), seconds=30, what="status.keyId changes"
    )
    new = await secret_env(kube, k8s_namespace, "rotate-memplane")
    assert new["MEMPLANE_API_KEY"] != old["MEMPLANE_API_KEY"]
    assert rotated != old_key_id
    async with AsyncMemplaneClient.from_env(new) as agent, AsyncMemplaneClient.from_env(old) as previous:
        await agent.list_memories()
        await previous.list_memories()  # still valid during the grace period

        async def revoked() -> bool | None:
            try:
                await previous.list_memories()
            except UnauthenticatedError:
                return True
            return None

        await eventually(revoked, seconds=60, what="the previous key is revoked after 10 s")
        await agent.list_memories()


async def _key_changed(kube: KubeCluster, namespace: str, old: str) -> str | None:
    key_id: str = (await get(kube, "memoryworkspace", "rotate", namespace))["status"].get("keyId", old)
    return key_id if key_id != old else None


async def test_drift_is_repaired(kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient) -> None:
    await apply(kube, workspace(k8s_namespace, "drift", quotas={"maxMemories": 50}))
    await wait_ready(kube, k8s_namespace, "drift")
    tenant = (await secret_env(kube, k8s_namespace, "drift-memplane"))["MEMPLANE_WORKSPACE"]
    await kube.akubectl("delete", "secret", "drift-memplane", "-n", k8s_namespace)
    await wait_for(kube, "create", "secret/drift-memplane", k8s_namespace, seconds=60)
    async with AsyncMemplaneClient.from_env(await secret_env(kube, k8s_namespace, "drift-memplane")) as agent:
        await agent.list_memories()
    await services_admin.update_workspace(
        admin_pb2.Workspace(name=tenant, quotas=admin_pb2.WorkspaceQuotas(max_memories=1)), ["quotas"]
    )

    async def restored() -> bool | None:
        return True if (await services_admin.get_workspace(tenant)).quotas.max_memories == 50 else None

    await eventually(restored, seconds=30, what="the resync restores maxMemories 50")


async def test_sandbox_classes_decide_sandbox_ready(kube: KubeCluster, k8s_namespace: str) -> None:
    # An e2b class whose key Secret does not exist (in the operator's namespace).
    cloud: dict[str, Any] = {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "SandboxClass",
        "metadata": {"name": "cloud-t"},
        "spec": {"type": "e2b", "e2b": {"template": "base", "apiKeySecretRef": {"name": "e2b", "key": "api-key"}}},
    }
    elsewhere: dict[str, Any] = {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "SandboxClass",
        "metadata": {"name": "team-only"},
        "spec": {"type": "local", "allowedNamespaces": {"matchLabels": {"memplane.io/team": "x"}}},
    }
    await apply(kube, cloud, elsewhere)
    await apply(
        kube,
        workspace(k8s_namespace, "cloud", sandbox={"sandboxClassName": "cloud-t"}),
        workspace(k8s_namespace, "missing", sandbox={"sandboxClassName": "later"}),
        workspace(k8s_namespace, "denied", sandbox={"sandboxClassName": "team-only"}),
    )
    for name, reason in (
        ("cloud", "InvalidParameters"),
        ("missing", "SandboxClassNotFound"),
        ("denied", "NamespaceNotAllowed"),
    ):
        await wait_for(
            kube, f"jsonpath={{.status.conditions[?(@.type=='SandboxReady')].reason}}={reason}",
            f"memoryworkspace/{name}", k8s_namespace,
        )  # fmt: skip
        obj = await get(kube, "memoryworkspace", name, k8s_namespace)
        assert condition(obj, "Ready")["status"] == "False"
        assert condition(obj, "DatabaseReady")["status"] == "True"  # the rest is provisioned
    later = {**elsewhere, "metadata": {"name": "later"}, "spec": {"type": "none"}}
    await apply(kube, later)  # the missing class appears: the resync finds it
    await wait_ready(kube, k8s_namespace, "missing")
    await kube.akubectl("label", "namespace", k8s_namespace, "memplane.io/team=x")
    await wait_for(kube, condition_reason_is("SandboxReady", "ClaimPending"), "memoryworkspace/denied", k8s_namespace)
    await bind_claim(kube, k8s_namespace, "denied-sandbox")  # a local class: Ready once its claim binds
    await wait_ready(kube, k8s_namespace, "denied")
    for name in ("cloud-t", "team-only", "later"):
        await kube.akubectl("delete", "sandboxclass", name)


async def test_suspend_stops_reconciling(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    manifest = workspace(k8s_namespace, "paused", quotas={"maxMemories": 5})
    await apply(kube, manifest)
    await wait_ready(kube, k8s_namespace, "paused")
    manifest["spec"].update(suspend=True, quotas={"maxMemories": 9})
    await apply(kube, manifest)
    await wait_for(kube, "jsonpath={.status.phase}=Suspended", "memoryworkspace/paused", k8s_namespace)
    assert (await services_admin.get_workspace(manifest["spec"]["tenantId"])).quotas.max_memories == 5
