"""The operator as a real process (`python -m memplane_operator`), killed with SIGKILL in
the middle of a reconcile — after the services did the work of an AdminService call but
before the operator heard the reply (a gRPC proxy holds it) — and started again: the
reconcile finishes, resuming at the step it was in, with one workspace and one key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane_operator.handlers import KOPF_PREFIX
from tests.e2e.operator.kubeobjects import (
    apply,
    condition,
    get,
    secret_env,
    wait_for,
    wait_ready,
    workspace,
)
from tests.e2e.operator.operator_process import OperatorProcess
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


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


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
        progress = _annotations(mid)
        for step in done_before:  # kopf recorded the finished steps before the kill
            assert any(k.startswith(f"{KOPF_PREFIX}/reconcile") and step in k for k in progress), progress
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
