"""Fixtures shared by the e2e tiers that use the real API server (operator/, chart/)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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
