"""Helpers of the chart tests: render the chart with helm, parse the documents, and play the
kubelet for the hooks (no kubelet runs here): the migration Job (the test runs the Job's
command itself, then reports the Job complete, as a kubelet and the job controller would)
and the `helm test` Pod (its phase reported)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.fix_kube import KubeCluster

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "memplane"
DSN_SECRET = "memplane-db"


def set_flags(values: dict[str, str]) -> list[str]:
    """`--set` flags of a {path: value} mapping (`--set-json` for JSON values)."""
    flags: list[str] = []
    for key, value in values.items():
        as_json = value[:1] in "[{" or re.fullmatch(r"-?[0-9]+\.[0-9]+", value) is not None  # --set keeps 0.5 a string
        flags += ["--set-json" if as_json else "--set", f"{key}={value}"]
    return flags


def render(kube: KubeCluster, values: dict[str, str], *extra: str, namespace: str = "memplane") -> list[dict[str, Any]]:
    """`helm template` of the chart: the documents, in order."""
    done = kube.helm("template", "mp", str(CHART), "--namespace", namespace, *set_flags(values), *extra)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every workload and Pod."""
    specs = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            specs.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "Pod":
            specs.append((d["metadata"]["name"], d["spec"]))
    return specs


async def play_kubelet_for_job(kube: KubeCluster, namespace: str, name: str, *, dsn: str) -> None:
    """Wait for the hook Job *name*, run its container's command here (`memplane migrate`
    against *dsn*, the value of the Secret the Job references), then mark it Complete."""
    await kube.akubectl("wait", "--for=create", f"job/{name}", "-n", namespace, "--timeout=120s", timeout=150)
    job = json.loads((await kube.akubectl("get", "job", name, "-n", namespace, "-o", "json")).stdout)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    [dsn_env] = [e for e in container["env"] if e["name"] == "MEMPLANE_DATABASE__DSN"]
    ref = dsn_env["valueFrom"]["secretKeyRef"]
    secret = json.loads((await kube.akubectl("get", "secret", ref["name"], "-n", namespace, "-o", "json")).stdout)
    assert base64.b64decode(secret["data"][ref["key"]]).decode() == dsn  # the Job reads the DSN we gave
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memplane", "migrate",
        env={**os.environ, "MEMPLANE_DATABASE__DSN": dsn},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    await finish_job(kube, namespace, name, succeeded=True)


async def finish_job(kube: KubeCluster, namespace: str, name: str, *, succeeded: bool) -> None:
    """Report Job *name* Complete (its one Pod succeeded) or Failed (BackoffLimitExceeded),
    as the job controller would."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kinds = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")
    reason = {} if succeeded else {"reason": "BackoffLimitExceeded", "message": "Job has reached the backoff limit"}
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now, "lastProbeTime": now, **reason} for kind in kinds
    ]
    status: dict[str, Any] = {"startTime": now, "conditions": conditions}
    status |= {"completionTime": now, "succeeded": 1} if succeeded else {"failed": 1}
    await kube.akubectl(
        "patch",
        "job",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


async def play_kubelet_for_test_pod(kube: KubeCluster, namespace: str, name: str, *, succeeded: bool) -> None:
    """Wait for the `helm test` Pod *name* and report it Succeeded or Failed."""
    await kube.akubectl("wait", "--for=create", f"pod/{name}", "-n", namespace, "--timeout=120s", timeout=150)
    status = {"status": {"phase": "Succeeded" if succeeded else "Failed"}}
    await kube.akubectl(
        "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
