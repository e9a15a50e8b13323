"""Helpers of the cluster tier: run agent Pods from the memplane image on the real node and read
what they print, wait on workloads, list what a release left behind.

An agent Pod runs ``tests/e2e/cluster/agent.py`` (mounted from a ConfigMap ``agent``) with the
MemoryWorkspace's Secret as its environment (``envFrom``), as operator/examples/agent-pod.yaml
does. Every wait here waits on the object itself (``kubectl wait``, a Pod's phase, a log line),
with a deadline that fails the test naming what it waited for.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.fix_kube import KubeCluster

AGENT_SCRIPT = Path(__file__).with_name("agent.py")
IMAGE = "localhost/memplane:test"
REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "memplane"
RELEASE = "memplane"
NAMESPACE = "memplane"
INSTALL_TIMEOUT = "10m"
HELM_TIMEOUT_SECONDS = 900.0

# The test's values: the image imported into the node, the bundled database on the node's default
# StorageClass. Everything else is the chart's default, as a user gets it.
VALUES = {
    "image.repository": IMAGE.rsplit(":", 1)[0],
    "image.tag": IMAGE.rsplit(":", 1)[1],
    "image.pullPolicy": "Never",
    "postgresql.enabled": "true",
    "operator.resyncSeconds": "3600",  # so that a Ready after the operator's restart is not the resync's
    "console.enabled": "true",  # off by default; on here so its Pod runs on the real node too
}


def set_flags(values: dict[str, str]) -> list[str]:
    return [flag for key, value in values.items() for flag in ("--set", f"{key}={value}")]


def workspace(name: str, namespace: str, tenant: str, sandbox: dict[str, str] | None = None) -> dict[str, Any]:
    """A MemoryWorkspace as operator/examples/memoryworkspace.yaml (no sandbox unless *sandbox*)."""
    spec: dict[str, Any] = {"tenantId": tenant, "credentials": {"secretName": f"{name}-memplane"}}
    if sandbox:
        spec["sandbox"] = sandbox
    return {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "MemoryWorkspace",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


POLL_SECONDS = 0.5
STOP_FILE = "/tmp/stop"  # noqa: S108 (inside the agent Pod: a load agent stops once it exists)
T = TypeVar("T")
POD_TIMEOUT_SECONDS = 240.0  # an agent Pod: start (~3 s), import memplane (~5 s on an idle box), its calls


class PodFailedError(AssertionError):
    """An agent Pod failed or did not finish in time; the message carries its log and status."""


def apply(kube: KubeCluster, *objects: dict[str, Any]) -> None:
    """`kubectl apply` of *objects* (JSON is YAML)."""
    kube.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def make_namespace(kube: KubeCluster, name: str, *, client: bool) -> None:
    """Create namespace *name*, labelled ``memplane.io/client=true`` when *client* (the label the
    chart's NetworkPolicy admits agents by), and the ConfigMap ``agent`` holding agent.py."""
    labels = {"memplane.io/client": "true"} if client else {}
    apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    apply(
        kube,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "agent", "namespace": name},
            "data": {"agent.py": AGENT_SCRIPT.read_text()},
        },
    )


def agent_pod(name: str, namespace: str, secret: str, *args: str) -> dict[str, Any]:
    """An agent Pod: the memplane image running agent.py *args*, the workspace Secret *secret* as env."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "agent"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "agent",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "/agent/agent.py", *args],
                    "envFrom": [{"secretRef": {"name": secret}}],
                    "volumeMounts": [{"name": "agent", "mountPath": "/agent"}],
                    "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
                }
            ],
            "volumes": [{"name": "agent", "configMap": {"name": "agent"}}],
        },
    }


def pod_phase(kube: KubeCluster, name: str, namespace: str) -> str:
    return kube.kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}").stdout


def logs(kube: KubeCluster, name: str, namespace: str) -> str:
    return kube.kubectl("logs", name, "-n", namespace, check=False).stdout


def describe(kube: KubeCluster, kind: str, name: str, namespace: str) -> str:
    done = kube.kubectl("describe", kind, name, "-n", namespace, check=False)
    return done.stdout[-3000:] + done.stderr[-500:]


def run_agent(kube: KubeCluster, name: str, namespace: str, secret: str, *args: str) -> dict[str, Any]:
    """Run an agent Pod to completion and return the JSON it printed after ``RESULT``.

    Raises PodFailedError (with its log and `kubectl describe`) if it fails, prints no result, or is
    not done within POD_TIMEOUT_SECONDS."""
    apply(kube, agent_pod(name, namespace, secret, *args))
    phase = wait_pod_done(kube, name, namespace)
    out = logs(kube, name, namespace)
    results = [line.removeprefix("RESULT ") for line in out.splitlines() if line.startswith("RESULT ")]
    if phase != "Succeeded" or not results:
        raise PodFailedError(
            f"agent Pod {namespace}/{name} ended {phase}:\n{out}\n{describe(kube, 'pod', name, namespace)}"
        )
    kube.kubectl("delete", "pod", name, "-n", namespace, "--wait=false")
    result: dict[str, Any] = json.loads(results[-1])
    return result


def wait_pod_done(kube: KubeCluster, name: str, namespace: str, timeout: float = POD_TIMEOUT_SECONDS) -> str:
    """Wait until Pod *name* has Succeeded or Failed; its phase. Raises PodFailedError past *timeout* s."""
    deadline = time.monotonic() + timeout
    while (phase := pod_phase(kube, name, namespace)) not in ("Succeeded", "Failed"):
        if time.monotonic() > deadline:
            raise PodFailedError(
                f"Pod {namespace}/{name} still {phase or 'absent'} after {timeout:.0f}s:\n"
                f"{logs(kube, name, namespace)}\n{describe(kube, 'pod', name, namespace)}"
            )
        time.sleep(POLL_SECONDS)
    return phase


def wait_log_line(
    kube: KubeCluster, name: str, namespace: str, line: str, timeout: float = POD_TIMEOUT_SECONDS
) -> None:
    """Wait until Pod *name*'s log has *line* (e.g. an agent's ``STARTED``). Raises PodFailedError if the
    Pod ends first or past *timeout* s."""
    deadline = time.monotonic() + timeout
    while line not in logs(kube, name, namespace).splitlines():
        phase = pod_phase(kube, name, namespace)
        if phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
            raise PodFailedError(
                f"Pod {namespace}/{name} ({phase}) never printed {line!r}:\n"
                f"{logs(kube, name, namespace)}\n{describe(kube, 'pod', name, namespace)}"
            )
        time.sleep(POLL_SECONDS)


def stop_load(kube: KubeCluster, name: str, namespace: str) -> dict[str, Any]:
    """Tell a ``load`` agent to stop (its stop file made through the kubelet's exec); its result."""
    kube.kubectl("exec", name, "-n", namespace, "--", "touch", STOP_FILE)
    phase = wait_pod_done(kube, name, namespace)
    out = logs(kube, name, namespace)
    results = [line.removeprefix("RESULT ") for line in out.splitlines() if line.startswith("RESULT ")]
    if phase != "Succeeded" or not results:
        raise PodFailedError(f"load Pod {namespace}/{name} ended {phase}:\n{out}")
    result: dict[str, Any] = json.loads(results[-1])
    return result


def wait_workspace_ready(kube: KubeCluster, name: str, namespace: str, timeout: float = 180.0) -> None:
    """`kubectl wait --for=condition=Ready memoryworkspace/<name>`; on failure, its status."""
    done = kube.kubectl(
        "wait", "--for=condition=Ready", f"memoryworkspace/{name}", "-n", namespace,
        f"--timeout={timeout:.0f}s", check=False, timeout=timeout + 30,
    )  # fmt: skip
    if done.returncode != 0:
        status = kube.kubectl("get", "memoryworkspace", name, "-n", namespace, "-o", "yaml", check=False).stdout
        raise AssertionError(f"MemoryWorkspace {namespace}/{name} not Ready: {done.stderr}\n{status}")


def eventually(probe: Callable[[], T | None], *, what: str, timeout: float = POD_TIMEOUT_SECONDS) -> T:
    """Call *probe* until it returns something other than None; that value. Raises AssertionError
    naming *what* past *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f}s")
        time.sleep(POLL_SECONDS)
    return found
