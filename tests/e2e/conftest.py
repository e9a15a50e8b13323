"""Fixtures shared by the e2e tiers that use the real API server (operator/, chart/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fix_kube import KubeCluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def memplane_crds(kube: KubeCluster) -> KubeCluster:
    """memplane's CRDs (operator/config/crd) Established and the operator's ClusterRole installed."""
    kube.kubectl("apply", "-f", str(REPO / "operator/config/crd"))
    kube.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/memoryworkspaces.memplane.io",
        "crd/sandboxclasses.memplane.io",
        "--timeout=60s",
    )
    kube.kubectl("apply", "-f", str(REPO / "operator/config/rbac/clusterrole.yaml"))
    return kube
