"""The operator as a real process (`python -m memplane_operator`), killed with SIGKILL in
the middle of a reconcile and started again:
- after the services did the work of an AdminService call but before the operator heard
  the reply (a gRPC proxy holds it): the reconcile finishes, resuming at the step it was
  in, with one workspace and one key;
- with a status write sent but not made (an HTTPS proxy in front of the API server holds
  it): the restarted operator writes the status at once, not at the next resync;
- in the middle of twenty reconciles: all twenty Ready soon after the restart.
The last two run with a resync interval longer than any of their waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from tests.e2e.operator.apiproxy import ApiProxy
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
from tests.e2e.operator.operator_process import LONG_RESYNC_SECONDS, OperatorProcess
from tests.fix_grpc_proxy import GrpcProxy
from tests.fix_kube import KubeCluster
from tests.fix_process import Services, free_port

ADMIN = "/memplane.v1.AdminService/"


@pytest.fixture
async def proxy(services: Services) -> AsyncIterator[tuple[GrpcProxy, str]]:
    """A gRPC proxy in front of the services: (proxy, its target)."""
    proxy = GrpcProxy(services.target)
    port = await proxy.start()
    yield proxy, f"127.0.0.1:{port}"
    await proxy.stop()


def _progress(obj: dict[str, Any]) -> dict[str, Any]:
    """kopf's record of the reconcile's steps: in the status, beside the conditions they set."""
    return dict(((obj.get("status") or {}).get("kopf") or {}).get("progress") or {})


@pytest.mark.parametrize(
    ("method", "done_before"),
    [
        ("CreateWorkspace", []),  # the workspace exists; the operator never heard
        ("CreateApiKey", ["workspace"]),  # the key is in the Secret and registered
        ("GetWorkspaceUsage", ["workspace", "credentials", "policy", "sandbox"]),  # the last step
    ],
)
async def test_a_killed_operator_resumes_and_leaves_one_workspace_and_one_key(
    method: str,
    done_before: list[str],
    kube: KubeCluster,
    own_namespace: str,
    proxy: tuple[GrpcProxy, str],
    admin_key: str,
    operator_kubeconfig: Path,
    services_admin: AsyncMemplaneClient,
    tmp_path: Path,
) -> None:
    grpc_proxy, target = proxy
    held = grpc_proxy.hold(ADMIN + method)
    operator = OperatorProcess(
        target=target,
        admin_key=admin_key,
        namespace=own_namespace,
        kubeconfig=operator_kubeconfig,
        log=tmp_path / "op.log",
    )
    manifest = workspace(own_namespace, "crash", quotas={"maxMemories": 10})
    tenant = manifest["spec"]["tenantId"]
    await operator.start()
    try:
        await operator.live()
        await apply(kube, manifest)
        await asyncio.wait_for(held.reached.wait(), timeout=60)  # the services answered; the operator waits
        mid = await get(kube, "memoryworkspace", "crash", own_namespace)
        await operator.kill()
        held.release()
        progress = _progress(mid)
        for step in done_before:  # kopf recorded the finished steps before the kill
            assert progress[f"reconcile/{step}"]["success"], progress
        status = mid.get("status", {})
        assert "usage" not in status  # the reconcile was cut short before its last step
        if done_before:  # a status was written: for this generation, Ready or not
            assert status["observedGeneration"] == mid["metadata"]["generation"]
        creates_before = grpc_proxy.calls[ADMIN + "CreateWorkspace"]
        await operator.start()
        ready = await wait_ready(kube, own_namespace, "crash")
    finally:
        await operator.stop()
    if method != "CreateWorkspace":  # resumed, not repeated: no second creation attempt
        assert grpc_proxy.calls[ADMIN + "CreateWorkspace"] == creates_before == 1
    found = await services_admin.get_workspace(tenant)
    assert dict(found.labels)["memplane.io/uid"] == ready["metadata"]["uid"]
    keys = (await services_admin.list_api_keys(tenant)).api_keys
    env = await secret_env(kube, own_namespace, "crash-memplane")
    assert [k.key_id for k in keys] == [ready["status"]["keyId"]]  # one key, the Secret's, none orphaned
    assert env["MEMPLANE_API_KEY"].split("_")[1] == ready["status"]["keyId"]
    async with AsyncMemplaneClient.from_env(env) as agent:
        assert (await agent.list_memories()).total_size == 0
    await services_admin.delete_workspace(tenant)


async def test_unreachable_services_are_reported_then_recovered_from(
    kube: KubeCluster,
    own_namespace: str,
    services: Services,
    admin_key: str,
    operator_kubeconfig: Path,
    services_admin: AsyncMemplaneClient,
    tmp_path: Path,
) -> None:
    port = free_port()  # nothing listens here yet
    log = tmp_path / "op.log"
    operator = OperatorProcess(
        target=f"127.0.0.1:{port}",
        admin_key=admin_key,
        namespace=own_namespace,
        kubeconfig=operator_kubeconfig,
        log=log,
    )
    manifest = workspace(own_namespace, "late")
    await operator.start()
    proxy = GrpcProxy(services.target)
    try:
        await apply(kube, manifest)
        await wait_for(
            kube,
            "jsonpath={.status.conditions[?(@.type=='DatabaseReady')].reason}=ServiceUnavailable",
            "memoryworkspace/late",
            own_namespace,
        )
        down = await get(kube, "memoryworkspace", "late", own_namespace)
        assert condition(down, "Ready")["status"] == "False"
        assert down["status"]["phase"] == "Pending"  # waiting for what will come, never served yet
        await proxy.start(port)  # the services come back
        await wait_ready(kube, own_namespace, "late", seconds=120)
        await proxy.stop()  # ... and go again: a served workspace is Degraded, not Failed
        await wait_for(kube, "jsonpath={.status.phase}=Degraded", "memoryworkspace/late", own_namespace)
        degraded = await get(kube, "memoryworkspace", "late", own_namespace)
        assert condition(degraded, "DatabaseReady")["reason"] == "ServiceUnavailable"
        proxy = GrpcProxy(services.target)
        await proxy.start(port)
        await wait_ready(kube, own_namespace, "late", seconds=120)
    finally:
        await operator.stop()
        await proxy.stop()
    # While the workspace step failed, no later step ran ahead of it.
    assert "reconcile/credentials' failed" not in log.read_text()
    await services_admin.delete_workspace(manifest["spec"]["tenantId"])


async def test_a_status_write_the_kill_cut_off_is_made_at_the_restart(
    kube: KubeCluster,
    own_namespace: str,
    services: Services,
    admin_key: str,
    operator_kubeconfig: Path,
    services_admin: AsyncMemplaneClient,
    tmp_path: Path,
) -> None:
    # The operator reaches the API server through a proxy that holds the object's second
    # status write, the one of the credentials step (the first is the workspace step's): kopf
    # has recorded that step by then, and the kill lands before the status it set is written
    # (the window the cluster admin's SIGKILL hit). No later step sets CredentialsReady.
    api = ApiProxy(kube)
    await api.start()
    held = api.hold("PATCH", "/memoryworkspaces/cut/status", skip=1)
    operator = OperatorProcess(
        target=services.target,
        admin_key=admin_key,
        namespace=own_namespace,
        kubeconfig=operator_kubeconfig,
        log=tmp_path / "op.log",
        resync_seconds=LONG_RESYNC_SECONDS,
    )
    manifest = workspace(own_namespace, "cut")
    try:
        await operator.start(kubeconfig=api.kubeconfig(operator_kubeconfig, tmp_path / "through-proxy"))
        await apply(kube, manifest)
        await asyncio.wait_for(held.reached.wait(), timeout=60)
        await operator.kill()
        await operator.start()  # straight to the API server
        ready = await wait_ready(kube, own_namespace, "cut", seconds=60)  # not after the 600 s resync
    finally:
        await operator.stop()
        await api.stop()
    for part in ("DatabaseReady", "CredentialsReady", "SandboxReady"):
        assert condition(ready, part)["status"] == "True"
    lost = json.loads(held.body)["status"]  # the status write that never landed ...
    assert condition({"status": lost}, "CredentialsReady")["status"] == "True"  # ... was the credentials step's
    keys = (await services_admin.list_api_keys(manifest["spec"]["tenantId"])).api_keys
    assert [k.key_id for k in keys] == [ready["status"]["keyId"]]
    await services_admin.delete_workspace(manifest["spec"]["tenantId"])


async def test_twenty_workspaces_killed_mid_reconcile_are_ready_soon_after_the_restart(
    kube: KubeCluster,
    own_namespace: str,
    services: Services,
    admin_key: str,
    operator_kubeconfig: Path,
    services_admin: AsyncMemplaneClient,
    tmp_path: Path,
) -> None:
    operator = OperatorProcess(
        target=services.target,
        admin_key=admin_key,
        namespace=own_namespace,
        kubeconfig=operator_kubeconfig,
        log=tmp_path / "op.log",
        resync_seconds=LONG_RESYNC_SECONDS,
    )
    manifests = [workspace(own_namespace, f"w{i:02d}") for i in range(20)]
    names = [m["metadata"]["name"] for m in manifests]
    await operator.start()
    try:
        await operator.live()
        await kube.akubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests})
        )
        await eventually(lambda: _ready_count(kube, own_namespace, at_least=1), seconds=60, what="a first one Ready")
        await operator.kill()  # the others are mid-reconcile
        await operator.start()
        for name in names:
            await wait_ready(kube, own_namespace, name, seconds=60)  # not after the 600 s resync
        readies = [await get(kube, "memoryworkspace", name, own_namespace) for name in names]
    finally:
        await operator.stop()
    for manifest, ready in zip(manifests, readies, strict=True):
        keys = (await services_admin.list_api_keys(manifest["spec"]["tenantId"])).api_keys
        assert [k.key_id for k in keys] == [ready["status"]["keyId"]]  # one key each, the Secret's
        await services_admin.delete_workspace(manifest["spec"]["tenantId"])


async def _ready_count(kube: KubeCluster, namespace: str, *, at_least: int) -> int | None:
    listed = json.loads((await kube.akubectl("get", "memoryworkspaces", "-n", namespace, "-o", "json")).stdout)
    ready = sum(1 for obj in listed["items"] if any(
        c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", [])
    ))  # fmt: skip
    return ready if ready >= at_least else None
