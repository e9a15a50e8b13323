"""Operator reconcile latency: `kubectl apply` of a MemoryWorkspace -> Ready, for one
workspace at a time and for many created at once, and the operator's memory.

Starts its own stack: a real control plane (scripts/k8s-testenv: etcd, kube-apiserver,
kube-controller-manager), memplane's services in this process (`bench_server`: embedded
PostgreSQL + the gRPC server on loopback), and the operator as its own process
(`python -m memplane_operator`, admin credentials, resync 60 s). Latency runs from the
start of `kubectl apply` to the first observation of Ready=True (objects are listed every
50 ms, so figures carry up to 50 ms of polling resolution plus one list call). RSS is
read from /proc/<pid>/status (VmRSS, VmHWM).

    python bench/operator_reconcile.py                  # 1 workspace x 10, then 50 at once (~1 min)
    python bench/operator_reconcile.py --single 3 --burst 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import bench_server, closing_banner, environment_banner, log, pct, print_table

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts" / "k8s-testenv"
POLL_SECONDS = 0.05


def _run(*cmd: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, check=False)  # noqa: S603
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr}")
    return done.stdout


def _manifest(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "memplane.io/v1alpha1",
        "kind": "MemoryWorkspace",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tenantId": f"{namespace}-{name}", "quotas": {"maxMemories": 1000}, "reclaimPolicy": "Delete"},
    }


def _ready_names(kubectl: list[str], namespace: str) -> set[str]:
    listed = json.loads(_run(*kubectl, "get", "memoryworkspaces", "-n", namespace, "-o", "json"))
    return {
        item["metadata"]["name"]
        for item in listed["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in item.get("status", {}).get("conditions", []))
    }


async def _apply_and_wait(kubectl: list[str], namespace: str, names: list[str], budget: float) -> dict[str, float]:
    """Apply the workspaces in one request; return seconds from the start of the apply to
    Ready per name (missing names did not get Ready within *budget* seconds)."""
    items = [_manifest(namespace, n) for n in names]
    started = time.perf_counter()
    await asyncio.to_thread(
        _run, *kubectl, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    seen: dict[str, float] = {}
    while len(seen) < len(names) and time.perf_counter() - started < budget:
        now = time.perf_counter() - started
        for name in (await asyncio.to_thread(_ready_names, kubectl, namespace)) & set(names):
            seen.setdefault(name, now)
        await asyncio.sleep(POLL_SECONDS)
    return seen


def _rss(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def main(args: argparse.Namespace) -> None:
    environment_banner("operator_reconcile", args)
    bin_dir = _run("bash", str(SCRIPTS / "build-toolchain.sh")).strip().splitlines()[-1]
    run_dir = Path(tempfile.mkdtemp(prefix="memplane-bench-kube-"))
    log(_run("bash", str(SCRIPTS / "kube-up.sh"), bin_dir, str(run_dir)).strip())
    kubeconfig = run_dir / "kubeconfig"
    kubectl = [f"{bin_dir}/kubectl", f"--kubeconfig={kubeconfig}"]
    operator: asyncio.subprocess.Process | None = None
    try:
        _run(*kubectl, "apply", "-f", str(REPO / "operator/config/crd"))
        _run(*kubectl, "wait", "--for=condition=Established", "crd/memoryworkspaces.memplane.io", "--timeout=60s")
        async with bench_server() as stack:
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "MEMPLANE_OPERATOR_ADMIN_TARGET": stack.target,
                "MEMPLANE_OPERATOR_ADMIN_KEY": stack.admin_key,
                "MEMPLANE_OPERATOR_HEALTH_PORT": "0",
                "MEMPLANE_OPERATOR_LOG_LEVEL": "WARNING",
            }
            operator = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memplane_operator", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            idle_rss = await _settled_rss(operator.pid)
            rows = []
            _run(*kubectl, "create", "namespace", "single")
            singles = []
            for i in range(args.single):
                seen = await _apply_and_wait(kubectl, "single", [f"w{i}"], args.budget)
                singles += list(seen.values())
            rows.append(
                [
                    "1 at a time",
                    args.single,
                    len(singles),
                    pct(singles, 50),
                    pct(singles, 90),
                    max(singles, default=float("nan")),
                ]
            )
            _run(*kubectl, "create", "namespace", "burst")
            burst = await _apply_and_wait(kubectl, "burst", [f"w{i}" for i in range(args.burst)], args.budget)
            values = list(burst.values())
            rows.append(
                [
                    f"{args.burst} at once",
                    args.burst,
                    len(values),
                    pct(values, 50),
                    pct(values, 90),
                    max(values, default=float("nan")),
                ]
            )
            print_table(
                "apply -> Ready, seconds (polled every 50 ms)",
                ["workspaces", "applied", "ready", "p50 s", "p90 s", "max s"],
                rows,
            )
            rss, hwm = _rss(operator.pid)
            print_table(
                "operator memory, MiB",
                ["when", "VmRSS", "VmHWM (peak)"],
                [
                    ["idle, before any workspace", idle_rss[0], idle_rss[1]],
                    [f"after {args.single + args.burst} workspaces", rss, hwm],
                ],
            )
    finally:
        if operator is not None:
            operator.terminate()
            await operator.wait()
        _run("bash", str(SCRIPTS / "kube-down.sh"), str(run_dir))
    closing_banner()


async def _settled_rss(pid: int) -> tuple[float, float]:
    """RSS once the operator has started (imports done): after it stops growing for 1 s."""
    last = (0.0, 0.0)
    for _ in range(60):
        await asyncio.sleep(1.0)
        now = _rss(pid)
        if abs(now[0] - last[0]) < 0.5:
            return now
        last = now
    return last


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--single", type=int, default=10, help="workspaces applied one at a time")
    parser.add_argument("--burst", type=int, default=50, help="workspaces applied at once")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds to wait for Ready")
    asyncio.run(main(parser.parse_args()))
