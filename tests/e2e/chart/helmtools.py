"""Helpers of the chart tests: render the chart with helm, parse the documents, and play the
kubelet for the hooks (no kubelet runs here): the migration Job and the uninstall check Job
(the test runs the Job's command itself, then reports the Job complete or failed, as a
kubelet and the job controller would) and the `helm test` Pod (its phase reported)."""

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
from urllib.parse import urlsplit

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


UNINSTALL_CHECK = REPO / "scripts" / "image" / "uninstall_check.py"


def job_uid(kube: KubeCluster, namespace: str, name: str) -> str | None:
    """The uid of Job *name*, None when there is none."""
    found = kube.kubectl("get", "job", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}", check=False)
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else None


async def wait_for_new_job(kube: KubeCluster, namespace: str, name: str, old_uid: str | None) -> dict[str, Any]:
    """The Job *name* once one other than *old_uid* exists (a hook's `before-hook-creation`
    replaces the one a failed attempt left), watched, not polled. Raises TimeoutError after 120 s."""
    watch = await asyncio.create_subprocess_exec(
        str(kube.bin_dir / "kubectl"), "get", "jobs", "-n", namespace, "--field-selector", f"metadata.name={name}",
        "--watch", "-o", 'jsonpath={.metadata.uid}{.metadata.deletionTimestamp}{"\\n"}',
        env=kube.env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert watch.stdout is not None

    async def new_uid() -> None:
        assert watch.stdout is not None
        while line := (await watch.stdout.readline()).decode().strip():
            if line != old_uid and len(line) == 36:  # a uid without a deletionTimestamp
                return
        raise AssertionError(f"the watch of job {name} ended")

    try:
        await asyncio.wait_for(new_uid(), 120)
    finally:
        watch.kill()
        await watch.wait()
    job: dict[str, Any] = json.loads((await kube.akubectl("get", "job", name, "-n", namespace, "-o", "json")).stdout)
    return job


async def play_kubelet_for_uninstall_check(
    kube: KubeCluster, namespace: str, name: str, workdir: Path, *, replacing: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Wait for the pre-delete hook Job *name* (one other than the Job of uid *replacing*),
    run its command here (the image's memplane-uninstall-check is
    scripts/image/uninstall_check.py) as its Pod would: with the Job's environment and a
    token of the Job's ServiceAccount (so the hook's own RBAC decides what it may list),
    against this API server; then report the Job Complete or Failed by the exit status.
    Returns the command's result."""
    job = await wait_for_new_job(kube, namespace, name, replacing)
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["memplane-uninstall-check"]
    assert pod["automountServiceAccountToken"] is True
    token = (await kube.akubectl("create", "token", pod["serviceAccountName"], "-n", namespace)).stdout.strip()
    account = workdir / f"serviceaccount-{name}"
    account.mkdir(parents=True, exist_ok=True)
    (account / "token").write_text(token)
    (account / "ca.crt").write_bytes(kube.ca_file.read_bytes())
    server = urlsplit(kube.server)
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": server.hostname or "",
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "MEMPLANE_SERVICEACCOUNT_DIR": str(account),
        **{e["name"]: e["value"] for e in container.get("env", [])},
    }
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(UNINSTALL_CHECK)], env=env, capture_output=True, text=True, timeout=120
    )
    await finish_job(kube, namespace, name, succeeded=done.returncode == 0)
    return done


async def play_kubelet_for_test_pod(kube: KubeCluster, namespace: str, name: str, *, succeeded: bool) -> None:
    """Wait for the `helm test` Pod *name* and report it Succeeded or Failed."""
    await kube.akubectl("wait", "--for=create", f"pod/{name}", "-n", namespace, "--timeout=120s", timeout=150)
    status = {"status": {"phase": "Succeeded" if succeeded else "Failed"}}
    await kube.akubectl(
        "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
