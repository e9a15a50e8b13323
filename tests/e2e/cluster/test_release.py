"""The chart as a user installs it, on a real node: `helm install --wait` with the bundled
PostgreSQL, `helm test`, a MemoryWorkspace applied and used by an agent Pod through the Services'
DNS names, tenants kept apart, NetworkPolicy enforced, a service Pod deleted and a `helm upgrade`
under continuous load without a failed call, then the documented uninstall leaving nothing behind.

The tests share one release and run in file order (each builds on the state the one before
left); a failure early makes the later ones fail with it, which says the same thing.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster.podtools import (
    CHART,
    HELM_TIMEOUT_SECONDS,
    IMAGE,
    INSTALL_TIMEOUT,
    NAMESPACE,
    RELEASE,
    STOP_FILE,
    VALUES,
    agent_pod,
    apply,
    eventually,
    make_namespace,
    run_agent,
    set_flags,
    stop_load,
    wait_log_line,
    wait_workspace_ready,
    workspace,
)
from tests.fix_kube import KubeCluster

pytestmark = pytest.mark.timeout(1800)  # the release fixture installs (minutes on 2 cores) inside the first test


@pytest.fixture(scope="module")
def release(node: KubeCluster) -> Iterator[dict[str, float]]:
    """`helm install --wait` of the chart into namespace memplane; the seconds it took. Uninstalled
    at the end if a test left it installed (the last test uninstalls it as a user would)."""
    started = time.monotonic()
    node.helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *set_flags(VALUES),
        "--wait", "--wait-for-jobs", f"--timeout={INSTALL_TIMEOUT}", timeout=HELM_TIMEOUT_SECONDS,
    )  # fmt: skip
    figures = {"install_seconds": time.monotonic() - started}
    yield figures
    if node.helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
        node.kubectl("delete", "memoryworkspaces", "--all", "-A", "--wait=true", "--timeout=120s", check=False)
        node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False, timeout=300)


def test_install_with_the_bundled_database_makes_every_pod_ready(node: KubeCluster, release: dict[str, float]) -> None:
    deployments = json.loads(node.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    names = {d["metadata"]["name"]: d for d in deployments}
    services = ("retrieval", "writeback", "compaction", "admin", "operator", "console")
    assert set(names) == {f"{RELEASE}-{c}" for c in services}
    for name, d in names.items():
        assert d["status"].get("readyReplicas") == d["spec"]["replicas"], (name, d["status"])
    [database] = json.loads(node.kubectl("get", "statefulsets", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert database["status"].get("readyReplicas") == 1
    claim = json.loads(node.kubectl("get", "pvc", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert [c["status"]["phase"] for c in claim] == ["Bound"]
    pods = json.loads(node.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    for pod in pods:
        if pod["metadata"].get("labels", {}).get("job-name"):
            assert pod["status"]["phase"] == "Succeeded", pod["metadata"]["name"]
        else:
            ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"]
            assert ready == "True", pod["metadata"]["name"]
            restarts = sum(c["restartCount"] for c in pod["status"]["containerStatuses"])
            assert restarts == 0, (pod["metadata"]["name"], pod["status"]["containerStatuses"])


def test_helm_test_passes(node: KubeCluster, release: dict[str, float]) -> None:
    done = node.helm("test", RELEASE, "-n", NAMESPACE, "--timeout=5m", timeout=400)
    assert "Phase:          Succeeded" in done.stdout, done.stdout  # helm exits non-zero on a failed test too


TENANT_TEXT = f"the team-a agent prefers tea, not coffee ({secrets.token_hex(4)})"


def test_an_agent_pod_adds_and_searches_with_the_mounted_secret(node: KubeCluster, release: dict[str, float]) -> None:
    make_namespace(node, "team-a", client=True)
    apply(node, workspace("support-bot", "team-a", "team-a-support"))
    wait_workspace_ready(node, "support-bot", "team-a")
    result = run_agent(node, "agent-roundtrip", "team-a", "support-bot-memplane", "roundtrip", TENANT_TEXT)
    assert result["id"]
    assert TENANT_TEXT in result["hits"]


def test_a_person_signs_in_to_the_console_and_sees_the_agents_memory(
    node: KubeCluster, release: dict[str, float]
) -> None:
    """The console's Pod (console.enabled) on the real node: signed in over its Service with
    the workspace's key, it lists what the agent stored, calling the services through its
    NetworkPolicy."""
    url = f"http://{RELEASE}-console.{NAMESPACE}.svc:8080/"
    result = run_agent(node, "agent-console", "team-a", "support-bot-memplane", "console", url)
    assert result["signed_in"] is True
    assert TENANT_TEXT in result["contents"]


def test_another_tenants_pod_sees_nothing_of_the_first(node: KubeCluster, release: dict[str, float]) -> None:
    make_namespace(node, "team-b", client=True)
    apply(node, workspace("other-bot", "team-b", "team-b-other"))
    wait_workspace_ready(node, "other-bot", "team-b")
    result = run_agent(node, "agent-search", "team-b", "other-bot-memplane", "search", TENANT_TEXT)
    assert result["hits"] == []
    # and its own write is found by it, so the empty answer above is not a broken search
    mine = run_agent(node, "agent-own", "team-b", "other-bot-memplane", "roundtrip", "team-b likes green tea")
    assert mine["hits"] == ["team-b likes green tea"]


def test_a_pod_in_an_unlabelled_namespace_cannot_reach_the_services(
    node: KubeCluster, release: dict[str, float]
) -> None:
    """The chart's NetworkPolicy admits agents only from namespaces labelled memplane.io/client=true;
    kube-network-policies enforces it. Same image, same key (copied), only the label differs."""
    make_namespace(node, "outsider", client=False)
    secret = json.loads(node.kubectl("get", "secret", "support-bot-memplane", "-n", "team-a", "-o", "json").stdout)
    apply(
        node,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "stolen", "namespace": "outsider"},
            "data": secret["data"],
        },
    )
    result = run_agent(node, "agent-probe", "outsider", "stolen", "probe", "10")
    assert result["ok"] is False, result
    assert result["code"] == "DeadlineExceededError", result  # refused for 10 s, not merely slow
    # the same probe from the labelled namespace gets through
    assert run_agent(node, "agent-probe", "team-a", "support-bot-memplane", "probe", "10")["ok"] is True


def test_a_local_sandbox_claim_binds_on_the_default_storage_class(node: KubeCluster, release: dict[str, float]) -> None:
    apply(
        node,
        {"apiVersion": "memplane.io/v1alpha1", "kind": "SandboxClass", "metadata": {"name": "local-files"},
         "spec": {"type": "local", "local": {"accessModes": ["ReadWriteOnce"]}}},
        workspace("files-bot", "team-a", "team-a-files", sandbox={"sandboxClassName": "local-files"}),
    )  # fmt: skip
    wait_workspace_ready(node, "files-bot", "team-a")
    status = json.loads(node.kubectl("get", "mws", "files-bot", "-n", "team-a", "-o", "json").stdout)["status"]
    claim = status["sandbox"]["claimName"]
    phase = node.kubectl("get", "pvc", claim, "-n", "team-a", "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Bound"


def test_a_pod_sandboxs_file_sync_round_trips_an_edit_through_the_kubelets_exec(
    node: KubeCluster, release: dict[str, float]
) -> None:
    """The operator's sandbox Pod becomes Ready by itself; a memory added over gRPC appears as a
    file in it, and an edit made in the Pod (kubectl exec, as an agent's tool would) becomes an
    update of that memory — both ways through the kubelet's exec."""
    apply(
        node,
        {"apiVersion": "memplane.io/v1alpha1", "kind": "SandboxClass", "metadata": {"name": "pod-sandboxes"},
         "spec": {"type": "pod", "pod": {"image": IMAGE}}},
        workspace("pod-bot", "team-a", "team-a-pod", sandbox={"sandboxClassName": "pod-sandboxes", "syncInterval": "2s"}),  # noqa: E501
    )  # fmt: skip
    wait_workspace_ready(node, "pod-bot", "team-a")
    status = json.loads(node.kubectl("get", "mws", "pod-bot", "-n", "team-a", "-o", "json").stdout)["status"]
    pod, root = status["sandbox"]["ref"], status["sandbox"]["root"]
    added = run_agent(node, "agent-sandbox", "team-a", "pod-bot-memplane", "roundtrip", "Carol takes the 7:15 train")

    def memory_file() -> str | None:
        found = node.kubectl(
            "exec", pod, "-n", "team-a", "--", "grep", "-rl", added["id"], f"{root}/Memory", check=False
        )
        return found.stdout.strip() or None

    path = eventually(memory_file, what=f"a file of memory {added['id']} in the sandbox Pod")
    text = node.kubectl("exec", pod, "-n", "team-a", "--", "cat", path).stdout
    assert "Carol takes the 7:15 train" in text
    edited = text.replace("Carol takes the 7:15 train", "Carol now cycles along the canal")
    node.kubectl("exec", "-i", pod, "-n", "team-a", "--", "sh", "-c", f"cat > {path}", input=edited)

    def updated() -> dict[str, object] | None:
        name = f"agent-edit-{secrets.token_hex(3)}"
        hits = run_agent(node, name, "team-a", "pod-bot-memplane", "search", "cycles along the canal")["hits"]
        return {"hits": hits} if "Carol now cycles along the canal" in hits else None

    assert "Carol takes the 7:15 train" not in eventually(updated, what="the edit found by search")["hits"]


def test_operator_pod_killed_mid_reconcile_of_20_workspaces_all_ready_without_a_resync(
    node: KubeCluster, release: dict[str, float]
) -> None:
    """The operator runs with a resync of an hour (VALUES), so every Ready here comes from acting
    on the restart, not from the timer; each workspace ends with one key."""
    make_namespace(node, "team-many", client=True)
    names = [f"ws-{i:02d}" for i in range(20)]
    apply(node, *(workspace(n, "team-many", f"team-many-{n}") for n in names))

    def some_ready_some_not() -> bool | None:
        items = json.loads(node.kubectl("get", "mws", "-n", "team-many", "-o", "json").stdout)["items"]
        ready = [i for i in items if _ready(i)]
        return True if 0 < len(ready) < len(names) else None

    eventually(some_ready_some_not, what="the operator part-way through the 20 workspaces")
    node.kubectl("delete", "pod", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator",
                 "--grace-period=0", "--force")  # fmt: skip
    for n in names:
        wait_workspace_ready(node, n, "team-many", timeout=300)
    for n in names:
        status = json.loads(node.kubectl("get", "mws", n, "-n", "team-many", "-o", "json").stdout)["status"]
        assert status["observedGeneration"] == 1
        assert status["keyId"]
    node.kubectl("delete", "mws", "--all", "-n", "team-many", "--wait=true", "--timeout=180s", timeout=240)


def _ready(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def _start_load(node: KubeCluster, name: str) -> None:
    apply(node, agent_pod(name, "team-a", "support-bot-memplane", "load", STOP_FILE, "0.2"))
    wait_log_line(node, name, "team-a", "STARTED")


def test_a_deleted_service_pod_is_replaced_without_a_failed_call(node: KubeCluster, release: dict[str, float]) -> None:
    _start_load(node, "load-delete")
    pods = node.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=retrieval", "-o", "name"
    ).stdout.split()
    node.kubectl("delete", "-n", NAMESPACE, pods[0], "--wait=true")
    node.kubectl("rollout", "status", f"deployment/{RELEASE}-retrieval", "-n", NAMESPACE, "--timeout=300s", timeout=330)
    result = stop_load(node, "load-delete", "team-a")
    assert result["calls"] > 0
    assert result["failed"] == 0, result


def test_helm_upgrade_under_continuous_reads_and_writes_fails_no_call(
    node: KubeCluster, release: dict[str, float]
) -> None:
    """A config change rolls every service Deployment (checksum/config) while an agent adds and
    searches every 0.2 s: graceful drain on SIGTERM, readiness before traffic, surge of 1."""
    _start_load(node, "load-upgrade")
    started = time.monotonic()
    node.helm(
        "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", "config.log_level=DEBUG",
        "--wait", f"--timeout={INSTALL_TIMEOUT}", timeout=HELM_TIMEOUT_SECONDS,
    )  # fmt: skip
    release["upgrade_seconds"] = time.monotonic() - started
    result = stop_load(node, "load-upgrade", "team-a")
    print(f"helm upgrade under load: {result} in {release['upgrade_seconds']:.1f}s")
    assert result["calls"] > 0
    assert result["failed"] == 0, result


def test_the_documented_uninstall_leaves_nothing_behind(node: KubeCluster, release: dict[str, float]) -> None:
    node.kubectl("delete", "memoryworkspaces", "--all", "-A", "--wait=true", "--timeout=180s", timeout=240)
    node.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m", timeout=400)
    for ns in ("team-a", "team-b", "outsider", NAMESPACE):
        node.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=180s", timeout=240)
    left = node.kubectl(
        "get", "pods,deployments,statefulsets,jobs,services,secrets,configmaps,pvc", "-A",
        "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name",
    ).stdout.split()  # fmt: skip
    assert left == []
    roles = node.kubectl("get", "clusterroles,clusterrolebindings", "-o", "name").stdout.split()
    assert [r for r in roles if RELEASE in r] == []
