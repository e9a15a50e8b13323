"""The chart's behaviour across a release's life, with real `helm` against a real API server of
this module's own (no kubelet: the tests play it for the hooks, helmtools.py):

- autoscaling turned on by an upgrade keeps the running replicas until the HPA acts, and later
  upgrades keep what the HPA chose (the chart renders the live count);
- no `helm test` Pod survives `helm test`, passed or failed, so none outlives `helm uninstall`.

The releases install no CRDs (crds.create=false: the module applies them once) and run no
migration Job, so each test owns its release and namespace."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.chart.helmtools import (
    CHART,
    REPO,
    play_kubelet_for_test_pod,
    set_flags,
)
from tests.fix_kube import KubeCluster

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
    await _ahelm(kube, "uninstall", release, "-n", namespace, "--wait")


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
