"""A real `helm install` / `upgrade` / `uninstall` of the chart into an API server of this
module's own: every object accepted and created, the CRDs Established and kept after the
uninstall, and the operator — started as a process with the chart's ServiceAccount token,
hence the chart's RBAC — taking a MemoryWorkspace through its whole life against the
services on loopback. No kubelet runs: the test plays it for the hook Jobs (migration, the
uninstall check) and the PersistentVolume controller for the sandbox's claim."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError
from tests.e2e.chart.helmtools import (
    CHART,
    DSN_SECRET,
    play_kubelet_for_job,
    play_kubelet_for_uninstall_check,
    set_flags,
)
from tests.e2e.operator.kubeobjects import apply, secret_env, wait_ready, workspace
from tests.e2e.operator.test_operator_crash import OperatorProcess
from tests.fix_kube import KubeCluster
from tests.fix_process import Services

NAMESPACE = "memplane"
ADMIN_SECRET = "memplane-admin"
VALUES = {"database.dsnSecret.name": DSN_SECRET, "auth.adminKeySecret.name": ADMIN_SECRET}


async def _helm_with_hook(kube: KubeCluster, *args: str, revision: int, dsn: str) -> str:
    """Run a helm install/upgrade and play the kubelet for its migration Job meanwhile."""
    helm = asyncio.create_task(asyncio.to_thread(kube.helm, *args, "--timeout", "3m", timeout=240))
    await play_kubelet_for_job(kube, NAMESPACE, f"mp-memplane-migrate-{revision}", dsn=dsn)
    return (await helm).stdout


@contextlib.asynccontextmanager
async def _operator_as_chart_account(
    kube: KubeCluster, services: Services, tmp_path: Path, namespace: str
) -> AsyncIterator[None]:
    """The operator as a process, authenticated with a token of the chart's ServiceAccount
    and the admin key from the chart's Secret."""
    token = (await kube.akubectl("create", "token", "mp-memplane-operator", "-n", NAMESPACE)).stdout.strip()
    kubeconfig = kube.kubeconfig_for_token(token, tmp_path / "operator-kubeconfig")
    admin_key = (await secret_env(kube, NAMESPACE, ADMIN_SECRET))["admin-key"]
    operator = OperatorProcess(
        target=services.target, admin_key=admin_key, namespace=namespace, kubeconfig=kubeconfig, log=tmp_path / "op.log"
    )
    await operator.start()
    try:
        yield
    finally:
        await operator.stop()
    log = (tmp_path / "op.log").read_text()
    assert "Forbidden" not in log, log[-3000:]  # the chart's RBAC was enough for everything


async def test_install_upgrade_operate_uninstall(
    fresh_kube: KubeCluster, services: Services, pg_dsn: str, admin_key: str, tmp_path: Path
) -> None:
    kube = fresh_kube
    await kube.akubectl("create", "namespace", NAMESPACE)
    await kube.akubectl("create", "secret", "generic", DSN_SECRET, "-n", NAMESPACE, f"--from-literal=dsn={pg_dsn}")
    await kube.akubectl(
        "create", "secret", "generic", ADMIN_SECRET, "-n", NAMESPACE, f"--from-literal=admin-key={admin_key}"
    )
    flags = set_flags(VALUES)
    await _helm_with_hook(kube, "install", "mp", str(CHART), "-n", NAMESPACE, *flags, revision=1, dsn=pg_dsn)

    # Every object of the release exists, as the API server stored it.
    manifest = kube.helm("get", "manifest", "mp", "-n", NAMESPACE).stdout
    stored = json.loads(kube.kubectl("get", "-n", NAMESPACE, "-f", "-", "-o", "json", input=manifest).stdout)["items"]
    kinds = sorted({o["kind"] for o in stored})
    assert kinds == sorted(
        {
            "ConfigMap",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount",
        }
    )
    kube.kubectl(
        "wait", "--for=condition=Established", "crd/memoryworkspaces.memplane.io", "crd/sandboxclasses.memplane.io"
    )
    assert json.loads(kube.helm("status", "mp", "-n", NAMESPACE, "-o", "json").stdout)["info"]["status"] == "deployed"

    # The operator with the chart's account takes a workspace through its life.
    team = "team-chart"
    await kube.akubectl("create", "namespace", team)
    async with _operator_as_chart_account(kube, services, tmp_path, team):
        manifest_ws = workspace(team, "agent", sandbox={"sandboxClassName": "files"})
        files = {"apiVersion": "memplane.io/v1alpha1", "kind": "SandboxClass", "metadata": {"name": "files"}}
        await apply(kube, {**files, "spec": {"type": "local"}}, manifest_ws)
        # No PersistentVolume controller runs here: play it for the sandbox's claim.
        await kube.akubectl("wait", "--for=create", "pvc/agent-sandbox", "-n", team, "--timeout=60s", timeout=90)
        await kube.akubectl("patch", "pvc", "agent-sandbox", "-n", team, "--subresource=status", "--type=merge",
                            "-p", '{"status":{"phase":"Bound"}}')  # fmt: skip
        await wait_ready(kube, team, "agent")
        env = await secret_env(kube, team, "agent-memplane")
        async with AsyncMemplaneClient.from_env(env) as agent:
            assert (await agent.list_memories()).total_size == 0
        await kube.akubectl("delete", "memoryworkspace", "agent", "-n", team, "--timeout=60s")
    async with AsyncMemplaneClient(services.target, admin_key) as admin:
        with pytest.raises(NotFoundError):  # reclaimPolicy Delete erased it
            await admin.get_workspace(manifest_ws["spec"]["tenantId"])

    # An upgrade that changes a value: the hook Job runs again, the Deployment follows.
    upgrade = [*flags, "--set", "services.retrieval.replicas=3"]
    await _helm_with_hook(kube, "upgrade", "mp", str(CHART), "-n", NAMESPACE, *upgrade, revision=2, dsn=pg_dsn)
    retrieval = json.loads(
        kube.kubectl("get", "deployment", "mp-memplane-retrieval", "-n", NAMESPACE, "-o", "json").stdout
    )
    assert retrieval["spec"]["replicas"] == 3

    # Uninstall (no MemoryWorkspace left: the pre-delete check passes): the release's objects
    # go, the CRDs stay (deleting one would delete every workspace object).
    uninstall = asyncio.create_task(
        asyncio.to_thread(kube.helm, "uninstall", "mp", "-n", NAMESPACE, "--wait", "--timeout", "2m", timeout=180)
    )
    check = await play_kubelet_for_uninstall_check(kube, NAMESPACE, "mp-memplane-uninstall-check", tmp_path)
    assert check.returncode == 0, check.stderr
    await uninstall
    left = kube.kubectl(
        "get", "deployments,services,configmaps", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=mp"
    )
    assert left.stdout.strip() == "" or "No resources" in left.stderr
    kube.kubectl("get", "crd", "memoryworkspaces.memplane.io", "sandboxclasses.memplane.io")
