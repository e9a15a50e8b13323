"""The chart's behaviour across a release's life, with real `helm` against a real API server of
this module's own (no kubelet: the tests play it for the hooks, helmtools.py):

- autoscaling turned on by an upgrade keeps the running replicas until the HPA acts, and later
  upgrades keep what the HPA chose (the chart renders the live count);
- no `helm test` Pod survives `helm test`, passed or failed, so none outlives `helm uninstall`;
- `helm uninstall` refuses while MemoryWorkspaces exist (a pre-delete hook Job listing them with
  an account of its own), deletes nothing then, and goes through once they are gone, leaving
  nothing behind (the hook's Job and RBAC included).

The releases install no CRDs (crds.create=false: the module applies them once) and run no
migration Job, so each test owns its release and namespace."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.chart.helmtools import (
    CHART,
    REPO,
    UNINSTALL_CHECK,
    job_uid,
    play_kubelet_for_test_pod,
    play_kubelet_for_uninstall_check,
    set_flags,
)
from tests.e2e.operator.kubeobjects import apply, workspace
from tests.fix_kube import KubeCluster

FINALIZER = "memplane.io/workspace-protection"

BASE = {"database.dsnSecret.name": "memplane-db", "crds.create": "false", "migrations.enabled": "false"}


@pytest.fixture(scope="module")
def cluster(fresh_kube: KubeCluster) -> KubeCluster:
    """This module's API server with memplane's CRDs."""
    fresh_kube.kubectl("apply", "-f", str(REPO / "operator/config/crd"))
    fresh_kube.kubectl(
        "wait", "--for=condition=Established", "crd/memoryworkspaces.memplane.io", "crd/sandboxclasses.memplane.io"
    )
    return fresh_kube


def _helm(kube: KubeCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kube.helm(*args, "--timeout", "2m", timeout=180, check=check)


async def _ahelm(kube: KubeCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(_helm, kube, *args, check=check)


def _replicas(kube: KubeCluster, namespace: str, name: str) -> int:
    deployment = json.loads(kube.kubectl("get", "deployment", name, "-n", namespace, "-o", "json").stdout)
    return int(deployment["spec"]["replicas"])


async def _uninstall(kube: KubeCluster, release: str, namespace: str, workdir: Path) -> None:
    """`helm uninstall` with its pre-delete check played (no MemoryWorkspace: it passes)."""
    job = f"{release}-memplane-uninstall-check"
    left_by_a_refusal = job_uid(kube, namespace, job)
    helm = asyncio.ensure_future(_ahelm(kube, "uninstall", release, "-n", namespace, "--wait"))
    check = await play_kubelet_for_uninstall_check(kube, namespace, job, workdir, replacing=left_by_a_refusal)
    assert check.returncode == 0, check.stderr
    await helm


def _left(kube: KubeCluster, namespace: str, release: str) -> list[str]:
    """Objects of *release* still in its namespace or the cluster (kind/name)."""
    names = []
    for scope in (["-n", namespace], []):
        kinds = (
            "all,serviceaccounts,secrets,configmaps,roles,rolebindings,jobs"
            if scope
            else "clusterroles,clusterrolebindings"
        )
        found = kube.kubectl("get", kinds, *scope, "-l", f"app.kubernetes.io/instance={release}", "-o", "name")
        names += found.stdout.split()
    return names


async def test_autoscaling_keeps_the_running_replicas_until_the_hpa_owns_them(
    cluster: KubeCluster, tmp_path: Path
) -> None:
    namespace, release = "hpa-ns", "hpa"
    await cluster.akubectl("create", "namespace", namespace)
    deployment = f"{release}-memplane-retrieval"
    await _ahelm(cluster, "install", release, str(CHART), "-n", namespace, *set_flags(BASE))
    assert _replicas(cluster, namespace, deployment) == 2

    # Turned on: the HPA is created and the two running pods stay (not the API's default of 1).
    auto = {**BASE, "services.retrieval.autoscaling.enabled": "true"}
    await _ahelm(cluster, "upgrade", release, str(CHART), "-n", namespace, *set_flags(auto))
    assert _replicas(cluster, namespace, deployment) == 2
    hpa = json.loads(cluster.kubectl("get", "hpa", deployment, "-n", namespace, "-o", "json").stdout)
    assert hpa["spec"]["minReplicas"] == 2

    # The HPA scales (through the scale subresource); an upgrade that rolls the pods keeps its count.
    await cluster.akubectl("scale", "deployment", deployment, "-n", namespace, "--replicas=5")
    rolled = {**auto, "config.log_level": "DEBUG"}
    await _ahelm(cluster, "upgrade", release, str(CHART), "-n", namespace, *set_flags(rolled))
    assert _replicas(cluster, namespace, deployment) == 5
    assert _replicas(cluster, namespace, f"{release}-memplane-writeback") == 2  # not autoscaled: its value

    # Turned off: `replicas` is the chart's again.
    await _ahelm(cluster, "upgrade", release, str(CHART), "-n", namespace, *set_flags(BASE))
    assert _replicas(cluster, namespace, deployment) == 2
    assert cluster.kubectl("get", "hpa", "-n", namespace, "-o", "name").stdout.strip() == ""
    await _uninstall(cluster, release, namespace, tmp_path)


async def test_no_helm_test_pod_outlives_its_test(cluster: KubeCluster, tmp_path: Path) -> None:
    namespace, release = "test-ns", "tst"
    pod = f"{release}-memplane-test-health"
    await cluster.akubectl("create", "namespace", namespace)
    await _ahelm(cluster, "install", release, str(CHART), "-n", namespace, *set_flags(BASE))
    for succeeded in (False, True):
        test = asyncio.ensure_future(_ahelm(cluster, "test", release, "-n", namespace, check=False))
        await play_kubelet_for_test_pod(cluster, namespace, pod, succeeded=succeeded)
        done = await test
        assert (done.returncode == 0) is succeeded, done.stderr
        assert cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip() == ""
    await _uninstall(cluster, release, namespace, tmp_path)
    assert _left(cluster, namespace, release) == []


async def test_uninstall_refuses_while_workspaces_exist_then_leaves_nothing(
    cluster: KubeCluster, tmp_path: Path
) -> None:
    namespace, release, team = "guard-ns", "guard", "guard-team"
    job = f"{release}-memplane-uninstall-check"
    for name in (namespace, team):
        await cluster.akubectl("create", "namespace", name)
    await _ahelm(cluster, "install", release, str(CHART), "-n", namespace, *set_flags(BASE))
    held = workspace(team, "support-bot")
    held["metadata"]["finalizers"] = [FINALIZER]  # as the operator's first pass leaves it
    await apply(cluster, held, workspace(team, "fresh"))

    uninstall = asyncio.ensure_future(_ahelm(cluster, "uninstall", release, "-n", namespace, check=False))
    check = await play_kubelet_for_uninstall_check(cluster, namespace, job, tmp_path)
    refused = await uninstall
    assert check.returncode == 1
    message = check.stderr
    assert f"uninstall refused: 2 MemoryWorkspace(s) exist: {team}/fresh, {team}/support-bot." in message
    assert f"1 of them carry the finalizer {FINALIZER}" in message
    assert "  kubectl delete memoryworkspaces --all -A\n" in message
    assert f"then run `helm uninstall {release} -n {namespace}` again" in message
    assert f"`helm uninstall {release} -n {namespace} --no-hooks`" in message
    assert refused.returncode != 0
    assert f"job {job} failed: BackoffLimitExceeded" in refused.stderr
    # Nothing of the release was deleted; the hook's account went with it; the failed Job
    # stays for `kubectl logs` until the next attempt replaces it.
    left = _left(cluster, namespace, release)
    assert f"deployment.apps/{release}-memplane-operator" in left
    assert f"job.batch/{job}" in left
    assert not [n for n in left if "uninstall-check" in n and not n.startswith("job.batch/")]
    # Helm records the release as `uninstalling` when the hook starts (hidden from `helm list`,
    # refused by `helm upgrade`); retrying the uninstall works from there, and keeping the
    # release takes a rollback to its revision (docs/operations/helm.md#uninstalling).
    [record] = json.loads(cluster.helm("history", release, "-n", namespace, "-o", "json").stdout)
    assert record["status"] == "uninstalling"
    cluster.helm("rollback", release, str(record["revision"]), "-n", namespace)
    status = json.loads(cluster.helm("status", release, "-n", namespace, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"

    # The operator would release them as they are deleted; here the finalizer goes by hand.
    await cluster.akubectl("patch", "memoryworkspace", "support-bot", "-n", team, "--type=merge", "-p",
                           '{"metadata":{"finalizers":null}}')  # fmt: skip
    await cluster.akubectl("delete", "memoryworkspaces", "--all", "-A", "--wait")
    await _uninstall(cluster, release, namespace, tmp_path)
    assert _left(cluster, namespace, release) == []
    assert cluster.helm("status", release, "-n", namespace, check=False).returncode != 0  # gone


async def test_the_check_counts_only_the_namespaces_the_operator_serves(cluster: KubeCluster, tmp_path: Path) -> None:
    """operator.namespaces: workspaces elsewhere never get this operator's finalizer. (The
    script as the Job runs it, with an account that may list everything.)"""
    for name in ("served-team", "other-team"):
        await cluster.akubectl("create", "namespace", name)
    await apply(cluster, workspace("other-team", "elsewhere"))
    await cluster.akubectl("create", "serviceaccount", "checker", "-n", "default")
    await cluster.akubectl("create", "clusterrolebinding", "checker", "--clusterrole=cluster-admin",
                           "--serviceaccount=default:checker")  # fmt: skip
    account = tmp_path / "account"
    account.mkdir()
    (account / "token").write_text((await cluster.akubectl("create", "token", "checker")).stdout.strip())
    (account / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
    server = urlsplit(cluster.server)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": server.hostname or "", "KUBERNETES_SERVICE_PORT": str(server.port)}
    env |= {"MEMPLANE_SERVICEACCOUNT_DIR": str(account), "MEMPLANE_RELEASE": "mp", "MEMPLANE_RELEASE_NAMESPACE": "mp"}

    def run(namespaces: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603
            [sys.executable, str(UNINSTALL_CHECK)],
            env={**env, "MEMPLANE_CHECK_NAMESPACES": json.dumps(namespaces)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    served = await asyncio.to_thread(run, ["served-team"])
    assert served.returncode == 0, served.stderr
    assert "no MemoryWorkspace in served-team" in served.stdout
    both = await asyncio.to_thread(run, ["served-team", "other-team"])
    assert both.returncode == 1
    assert "uninstall refused: 1 MemoryWorkspace(s) exist: other-team/elsewhere." in both.stderr
    per_namespace = [f"  kubectl delete memoryworkspaces --all -n {ns}" for ns in ("served-team", "other-team")]
    assert "\n".join(per_namespace) + "\n" in both.stderr
    await cluster.akubectl("delete", "memoryworkspace", "elsewhere", "-n", "other-team", "--wait")
    await cluster.akubectl("delete", "clusterrolebinding", "checker")


async def test_a_reinstall_finds_the_bundled_databases_password_with_its_kept_data(
    cluster: KubeCluster, tmp_path: Path
) -> None:
    """The trial database's claim outlives `helm uninstall` (a StatefulSet's claims do), so its
    password Secret must too: a reinstall that made a new password would meet the old data
    directory's and every service would fail to log in."""
    namespace, release = "pg-again", "again"
    values = {**BASE, "postgresql.enabled": "true"}
    del values["database.dsnSecret.name"]
    await cluster.akubectl("create", "namespace", namespace)
    secret = f"{release}-memplane-postgresql"

    def password() -> str:
        found = json.loads(cluster.kubectl("get", "secret", secret, "-n", namespace, "-o", "json").stdout)
        return str(found["data"]["password"])

    await _ahelm(cluster, "install", release, str(CHART), "-n", namespace, *set_flags(values))
    first = password()
    await _uninstall(cluster, release, namespace, tmp_path)
    assert password() == first  # kept beside the claim
    await _ahelm(cluster, "install", release, str(CHART), "-n", namespace, *set_flags(values))
    assert password() == first
    await _uninstall(cluster, release, namespace, tmp_path)
