"""The admin view beside a real kube-apiserver (tests.fix_kube): a console given a kubeconfig
of the ServiceAccount and ClusterRole the chart renders for it shows each MemoryWorkspace's
status conditions and observedGeneration beside its workspace, in real Chromium; without
cluster access, or with an identity RBAC refuses, the page says so instead of failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.async_api import expect

from tests.e2e.chart.helmtools import named, render
from tests.e2e.console.conftest import Console, Tab, start_console, stop_console
from tests.e2e.operator.kubeobjects import apply, workspace
from tests.fix_kube import KubeCluster
from tests.fix_server import TestWorkspace, WorkspaceFactory

pytestmark = pytest.mark.e2e

CONSOLE_SA = "mp-memplane-console"
FAILED_MESSAGE = "SandboxClass 'gone' does not exist"


async def _sign_in_as_admin(tab: Tab, console: Console, admin_key: str) -> None:
    await tab.page.goto(console.url)
    await tab.page.get_by_label("API key").fill(admin_key)
    await tab.page.get_by_role("button", name="Sign in").click()
    await expect(tab.page.locator(".who")).to_have_text("admin key testadmin")


async def _chart_identity(kube: KubeCluster, namespace: str, tmp_path: Path, *, bind: bool = True) -> Path:
    """The console's ServiceAccount, ClusterRole and binding as the chart renders them (the
    cluster-scoped ones renamed after *namespace*, so tests do not share them); a kubeconfig
    holding a token of that ServiceAccount. *bind* False leaves the role unbound."""
    docs = render(kube, {"database.dsnSecret.name": "db", "console.enabled": "true"}, namespace=namespace)
    account = named(docs, "ServiceAccount", CONSOLE_SA)
    account["metadata"]["namespace"] = namespace
    role = named(docs, "ClusterRole", CONSOLE_SA)
    binding = named(docs, "ClusterRoleBinding", CONSOLE_SA)
    role["metadata"]["name"] = binding["metadata"]["name"] = binding["roleRef"]["name"] = f"{namespace}-console"
    await apply(kube, account, role, *([binding] if bind else []))
    token = (await kube.akubectl("create", "token", CONSOLE_SA, "-n", namespace, "--duration=1h")).stdout.strip()
    return kube.kubeconfig_for_token(token, tmp_path / "console.kubeconfig", namespace)


async def _memory_workspace(kube: KubeCluster, namespace: str, tenant: str) -> None:
    """A MemoryWorkspace for *tenant* whose status an operator would have written: Failed,
    two conditions, observedGeneration 1 (the operator is not running: the test writes it)."""
    await apply(kube, workspace(namespace, "team-memory", tenant))
    status = {
        "status": {
            "observedGeneration": 1,
            "phase": "Failed",
            "workspace": tenant,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "SandboxClassMissing",
                    "message": FAILED_MESSAGE,
                    "lastTransitionTime": "2026-12-01T10:00:00Z",
                    "observedGeneration": 1,
                },
                {
                    "type": "DatabaseReady",
                    "status": "True",
                    "reason": "Provisioned",
                    "message": "partitions and key in place",
                    "lastTransitionTime": "2026-12-01T09:59:00Z",
                    "observedGeneration": 1,
                },
            ],
        }
    }
    await kube.akubectl(
        "patch",
        "memoryworkspace",
        "team-memory",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )


async def test_the_admin_view_shows_each_memoryworkspace_s_conditions(
    tab: Tab,
    server: str,
    admin_key: str,
    workspace_factory: WorkspaceFactory,
    memplane_crds: KubeCluster,
    k8s_namespace: str,
    tmp_path: Path,
) -> None:
    ws: TestWorkspace = await workspace_factory()
    await _memory_workspace(memplane_crds, k8s_namespace, ws.name)
    kubeconfig = await _chart_identity(memplane_crds, k8s_namespace, tmp_path)
    console = await start_console(server, "--kubeconfig", str(kubeconfig), "--sign-ins-per-minute", "600")
    try:
        await _sign_in_as_admin(tab, console, admin_key)
        card = tab.page.locator("article.workspace", has_text=ws.name)
        mw = card.locator(".memory-workspace")
        await expect(mw).to_contain_text(f"MemoryWorkspace {k8s_namespace}/team-memory")
        await expect(mw.locator(".observed")).to_have_text("Failed · generation 1, observed")
        ready = mw.locator("tr.condition", has_text="Ready").first
        await expect(ready.locator("td")).to_have_text(
            ["Ready", "False", "SandboxClassMissing", FAILED_MESSAGE, "2026-12-01 10:00:00Z"]
        )
        await expect(mw.locator("tr.condition-true")).to_contain_text("DatabaseReady")
        await expect(tab.page.locator(".cluster-note")).to_contain_text("in every namespace")
        await card.scroll_into_view_if_needed()
        await tab.shot("admin-conditions")
    finally:
        await stop_console(console)


async def test_without_cluster_access_the_page_says_so(
    tab: Tab, console: Console, admin_key: str, workspace_factory: WorkspaceFactory
) -> None:
    await workspace_factory()
    await _sign_in_as_admin(tab, console, admin_key)  # the session's console: no kubeconfig, not in a Pod
    await expect(tab.page.locator(".cluster-note")).to_contain_text(
        "No MemoryWorkspace conditions: the console runs outside a Kubernetes cluster"
    )
    await expect(tab.page.locator("article.workspace").first).to_be_visible()
    await expect(tab.page.locator(".state-error")).to_have_count(0)


async def test_an_identity_rbac_refuses_is_explained_not_an_error(
    tab: Tab,
    server: str,
    admin_key: str,
    workspace_factory: WorkspaceFactory,
    memplane_crds: KubeCluster,
    k8s_namespace: str,
    tmp_path: Path,
) -> None:
    await workspace_factory()
    kubeconfig = await _chart_identity(memplane_crds, k8s_namespace, tmp_path, bind=False)
    console = await start_console(server, "--kubeconfig", str(kubeconfig), "--sign-ins-per-minute", "600")
    try:
        await _sign_in_as_admin(tab, console, admin_key)
        await expect(tab.page.locator(".cluster-note")).to_contain_text("the Kubernetes API refused (403)")
        await expect(tab.page.locator("article.workspace").first).to_be_visible()
        await expect(tab.page.locator(".state-error")).to_have_count(0)
    finally:
        await stop_console(console)
