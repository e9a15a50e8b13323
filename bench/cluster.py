"""memplane on a real one-node cluster: what a platform team sees when it installs the chart.

Starts its own node (scripts/k8s-testenv/node-up.sh: kubelet, containerd, kube-proxy, CoreDNS,
kube-router; the memplane image MEMPLANE_IMAGE, default localhost/memplane:test, imported from
Podman), then measures on the path a user's request takes:

- `helm install --wait` of the chart with the bundled PostgreSQL -> every Pod Ready (s);
- `kubectl apply` of MemoryWorkspaces -> Ready, for 1 and for --burst at once (s);
- each Pod's RSS (PID 1's VmRSS, read through the kubelet's exec) idle and under the load;
- searches/s from agent Pods through the retrieval Service's DNS name (every query new, so
  each is embedded by the server), with 1 and then 2 retrieval replicas; --agents Pods of
  --clients closed-loop searchers each. gRPC keeps one connection per client Pod and
  kube-proxy balances connections, not calls: the ratio 2 replicas / 1 replica is the figure.

    python bench/cluster.py                          # ~4 min once the binaries and image exist
    python bench/cluster.py --burst 20 --seconds 10
Needs root (the node). Prints tables; the node is stopped and every host change undone at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import closing_banner, environment_banner, log, print_table

from tests.e2e.cluster.podtools import (
    CHART,
    HELM_TIMEOUT_SECONDS,
    INSTALL_TIMEOUT,
    NAMESPACE,
    RELEASE,
    VALUES,
    agent_pod,
    apply,
    make_namespace,
    set_flags,
    wait_pod_done,
    workspace,
)
from tests.fix_kube import KubeCluster, kube_bin_dir
from tests.fix_node import node_bin_dir, real_node

TENANTS = "bench-tenants"


def seconds_since(t0: float) -> float:
    return round(time.monotonic() - t0, 2)


def rss_mib(node: KubeCluster) -> dict[str, float]:
    """PID 1's VmRSS (MiB) of every running container of the release, by Pod name."""
    pods = json.loads(node.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    found: dict[str, float] = {}
    for pod in pods:
        if pod["status"].get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        status = node.kubectl("exec", name, "-n", NAMESPACE, "--", "cat", "/proc/1/status", check=False).stdout
        kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        found[name] = round(kib / 1024, 1)
    return found


def ready_after_apply(node: KubeCluster, names: list[str]) -> float:
    """Seconds from `kubectl apply` of *names* to all of them Ready (kubectl wait)."""
    t0 = time.monotonic()
    apply(node, *(workspace(n, TENANTS, f"{TENANTS}-{n}") for n in names))
    node.kubectl(
        "wait", "--for=condition=Ready", "-n", TENANTS, *(f"memoryworkspace/{n}" for n in names),
        "--timeout=600s", timeout=660,
    )  # fmt: skip
    return seconds_since(t0)


def searches_per_second(node: KubeCluster, tag: str, agents: int, clients: int, seconds: float) -> dict[str, Any]:
    """--agents agent Pods each running `qps` through the Services; their summed searches/s and
    the release's RSS sampled while they run."""
    names = [f"qps-{tag}-{i}" for i in range(agents)]
    apply(node, *(agent_pod(n, TENANTS, "ws-0-memplane", "qps", str(seconds), str(clients)) for n in names))
    for n in names:  # running: each has started its clock
        node.kubectl("wait", "--for=condition=Ready", f"pod/{n}", "-n", TENANTS, "--timeout=120s", timeout=150)
    time.sleep(seconds / 2)  # not synchronisation: the moment the RSS is sampled, mid-load
    loaded = rss_mib(node)
    total, failed = 0.0, 0
    for n in names:
        if wait_pod_done(node, n, TENANTS) != "Succeeded":
            raise RuntimeError(node.kubectl("logs", n, "-n", TENANTS, check=False).stdout)
        out = node.kubectl("logs", n, "-n", TENANTS).stdout
        result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
        total += result["searches"] / result["seconds"]
        failed += result["failed"]
        node.kubectl("delete", "pod", n, "-n", TENANTS, "--wait=false")
    return {"qps": round(total, 1), "failed": failed, "rss": loaded}


def scale_retrieval(node: KubeCluster, replicas: int) -> None:
    deployment = f"deployment/{RELEASE}-retrieval"
    node.kubectl("scale", deployment, "-n", NAMESPACE, f"--replicas={replicas}")
    node.kubectl("rollout", "status", deployment, "-n", NAMESPACE, "--timeout=300s", timeout=330)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--burst", type=int, default=50, help="workspaces applied at once")
    ap.add_argument("--agents", type=int, default=2, help="agent Pods searching at once")
    ap.add_argument("--clients", type=int, default=4, help="closed-loop searchers per agent Pod")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each searches/s run")
    args = ap.parse_args()
    os.environ.setdefault("MEMPLANE_IMAGE", "localhost/memplane:test")
    environment_banner("cluster", args)
    bin_dir, node_bin = kube_bin_dir(log), node_bin_dir()
    with (
        tempfile.TemporaryDirectory(prefix="memplane-bench-node-") as tmp,
        real_node(bin_dir, node_bin, Path(tmp)) as node,
    ):
        t0 = time.monotonic()
        node.helm(
            "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *set_flags(VALUES),
            "--wait", f"--timeout={INSTALL_TIMEOUT}", timeout=HELM_TIMEOUT_SECONDS,
        )  # fmt: skip
        install = seconds_since(t0)
        idle = rss_mib(node)
        make_namespace(node, TENANTS, client=True)
        one = ready_after_apply(node, ["ws-0"])
        burst = ready_after_apply(node, [f"ws-b{i}" for i in range(args.burst)])
        scale_retrieval(node, 1)
        single = searches_per_second(node, "r1", args.agents, args.clients, args.seconds)
        scale_retrieval(node, 2)
        double = searches_per_second(node, "r2", args.agents, args.clients, args.seconds)
        print_table(
            "times (s)",
            ["helm install --wait -> all Ready", "apply 1 -> Ready", f"apply {args.burst} -> all Ready"],
            [[install, one, burst]],
        )
        print_table(
            f"searches/s through the Service ({args.agents} agent Pods x {args.clients} clients, {args.seconds:g} s)",
            ["retrieval replicas", "searches/s", "failed", "ratio to 1 replica"],
            [
                [1, single["qps"], single["failed"], 1.0],
                [2, double["qps"], double["failed"], round(double["qps"] / single["qps"], 2)],
            ],
        )
        pods = sorted(set(idle) | set(double["rss"]))
        print_table(
            "RSS of PID 1 (MiB)",
            ["Pod", "idle", "under load (2 replicas)"],
            [[p, idle.get(p, "-"), double["rss"].get(p, "-")] for p in pods],
        )
    closing_banner()


if __name__ == "__main__":
    main()
