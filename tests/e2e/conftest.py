"""Fixtures shared by the e2e tiers that use the real API server (operator/, chart/)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fix_kube import KubeCluster

REPO = Path(__file__).resolve().parents[2]
CRD_GROUP_VERSION = "memplane.io/v1alpha1"
DISCOVERY_SECONDS = 60.0


@pytest.fixture(scope="session")
def memplane_crds(kube: KubeCluster) -> KubeCluster:
    """memplane's CRDs (operator/config/crd) Established and in the API server's discovery,
    and the operator's ClusterRole installed."""
    kube.kubectl("apply", "-f", str(REPO / "operator/config/crd"))
    kube.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/memoryworkspaces.memplane.io",
        "crd/sandboxclasses.memplane.io",
        "--timeout=60s",
    )
    _until_discovered(kube, f"/apis/{CRD_GROUP_VERSION}", {"memoryworkspaces", "sandboxclasses"})
    kube.kubectl("apply", "-f", str(REPO / "operator/config/rbac/clusterrole.yaml"))
    return kube


def _until_discovered(kube: KubeCluster, path: str, resources: set[str]) -> None:
    """Wait until the discovery document at *path* lists *resources*. Established comes
    first: the API server publishes a new group's discovery a moment later, and an operator
    started in between scans without it (kopf, which then watches nothing of it until the
    next change it notices: a canary seen unhandled for a minute). Discovery raises no
    event: polled, DISCOVERY_SECONDS at most."""
    deadline = time.monotonic() + DISCOVERY_SECONDS
    listed: set[str] = set()
    while time.monotonic() < deadline:
        done = kube.kubectl("get", "--raw", path, check=False)
        if done.returncode == 0:
            listed = {r["name"] for r in json.loads(done.stdout).get("resources", [])}
            if resources <= listed:
                return
    pytest.fail(f"{path} did not list {sorted(resources)} in {DISCOVERY_SECONDS} s (it listed {sorted(listed)})")


@pytest.fixture(autouse=True)
async def _close_agentscope_models(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """Close the OpenAI client of every AgentScope `OpenAIChatModel` a test made (AgentScope
    never closes it): left open, its garbage-collected client logs "Task exception was
    never retrieved" into whichever test runs then."""
    try:
        from agentscope.model import OpenAIChatModel
    except ImportError:  # the AgentScope extra is not installed
        yield
        return
    made: list[Any] = []
    init = OpenAIChatModel.__init__

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(OpenAIChatModel, "__init__", recording)
    yield
    for model in made:
        with contextlib.suppress(RuntimeError):  # "Event loop is closed": made and used in a loop of its own
            await model.client.close()
