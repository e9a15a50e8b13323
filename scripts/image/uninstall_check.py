#!/opt/memplane/bin/python
"""memplane-uninstall-check (this file, installed in the image under that name by the
Dockerfile): the Helm chart's pre-delete hook. `helm uninstall` would remove
the operator while MemoryWorkspaces still carry its finalizer (memplane.io/workspace-protection):
nothing would remove it again, so deleting such a workspace — or its namespace — would hang
Terminating. This lists the MemoryWorkspaces the operator serves and, when there are any,
exits 1 with a message saying how many, which, and how to delete them first; Helm then
stops the uninstall before deleting anything (and prints this output: the hook's
`helm.sh/hook-output-log-policy`). Nothing is deleted here: each workspace's reclaimPolicy
decides what deleting it erases, and that is the cluster operator's call.

Environment: KUBERNETES_SERVICE_HOST/_PORT and the Pod's ServiceAccount token and CA (in
MEMPLANE_SERVICEACCOUNT_DIR, default /var/run/secrets/kubernetes.io/serviceaccount);
MEMPLANE_CHECK_NAMESPACES, a JSON list of the namespaces the operator serves ([]: all);
MEMPLANE_RELEASE and MEMPLANE_RELEASE_NAMESPACE, for the message.
Exit status 0: none exist (or the CRD is gone), 1: some exist, 2: they could not be listed.
Standard library only: it runs in the memplane image with its own Python.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

GROUP_VERSION = "memplane.io/v1alpha1"
PLURAL = "memoryworkspaces"
FINALIZER = "memplane.io/workspace-protection"
ATTEMPTS = 3  # a transient API error is retried twice, 2 s apart, before the uninstall is refused
SHOWN = 20  # workspaces named in the message; the count covers all of them


class UnreadableError(Exception):
    """The API server did not answer the list (the message says what it said)."""


def _get(base: str, path: str, token: str, context: ssl.SSLContext) -> dict[str, Any] | None:
    """GET *path* as JSON; None for 404 (no such resource: the CRD is not installed)."""
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, context=context, timeout=15) as reply:  # noqa: S310
                page: dict[str, Any] = json.loads(reply.read())
                return page
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            detail = error.read().decode(errors="replace")[:500]
            if error.code < 500 or attempt == ATTEMPTS:
                raise UnreadableError(f"GET {path}: HTTP {error.code}: {detail}") from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            if attempt == ATTEMPTS:
                raise UnreadableError(f"GET {path}: {error}") from error
        time.sleep(2)
    raise AssertionError("unreachable")


def list_workspaces(base: str, token: str, context: ssl.SSLContext, namespaces: list[str]) -> list[dict[str, Any]]:
    """Every MemoryWorkspace in *namespaces* (all namespaces when empty), following `continue`."""
    paths = (
        [f"/apis/{GROUP_VERSION}/namespaces/{urllib.parse.quote(ns)}/{PLURAL}" for ns in namespaces]
        if namespaces
        else [f"/apis/{GROUP_VERSION}/{PLURAL}"]
    )
    found: list[dict[str, Any]] = []
    for path in paths:
        after = ""
        while True:
            query = "?limit=500" + (f"&continue={urllib.parse.quote(after)}" if after else "")
            page = _get(base, path + query, token, context)
            if page is None:
                break
            found.extend(page.get("items") or [])
            after = (page.get("metadata") or {}).get("continue") or ""
            if not after:
                break
    return found


def refusal(workspaces: list[dict[str, Any]], namespaces: list[str], release: str, release_ns: str) -> str:
    """The message that stops the uninstall."""
    meta = [w["metadata"] for w in workspaces]
    names = sorted(f"{m['namespace']}/{m['name']}" for m in meta)
    deleting = sum(1 for m in meta if m.get("deletionTimestamp"))
    guarded = sum(1 for m in meta if FINALIZER in (m.get("finalizers") or []))
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    commands = [f"  kubectl delete memoryworkspaces --all -n {ns}" for ns in namespaces] or [
        "  kubectl delete memoryworkspaces --all -A"
    ]
    target = f"helm uninstall {release} -n {release_ns}" if release else "helm uninstall"
    return "\n".join(
        [
            f"memplane: uninstall refused: {len(names)} MemoryWorkspace(s) exist: {shown}.",
            f"{guarded} of them carry the finalizer {FINALIZER}, which only this release's operator removes"
            + (f" ({deleting} already being deleted: the operator is finishing them)" if deleting else "")
            + ": uninstalled now, they and any namespace deleted with them would stay Terminating.",
            "Delete them first, while the operator runs (each workspace's reclaimPolicy decides whether its "
            "memories are erased or kept):",
            *commands,
            f"then run `{target}` again.",
            f"To uninstall anyway and keep them for a later install of the operator: `{target} --no-hooks` "
            "(then delete none of them, nor their namespaces, until the operator runs again).",
        ]
    )


def main() -> int:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        print("memplane: KUBERNETES_SERVICE_HOST is not set: not in a Pod", file=sys.stderr)
        return 2
    account = Path(os.environ.get("MEMPLANE_SERVICEACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount"))
    namespaces = json.loads(os.environ.get("MEMPLANE_CHECK_NAMESPACES") or "[]")
    host = f"[{host}]" if ":" in host else host
    try:
        token = (account / "token").read_text().strip()
        context = ssl.create_default_context(cafile=str(account / "ca.crt"))
        workspaces = list_workspaces(f"https://{host}:{port}", token, context, namespaces)
    except (UnreadableError, OSError, ValueError) as error:
        print(f"memplane: uninstall refused: the MemoryWorkspaces could not be listed: {error}", file=sys.stderr)
        print("Check the API server and retry, or skip this check with `helm uninstall --no-hooks`.", file=sys.stderr)
        return 2
    if workspaces:
        release, release_ns = os.environ.get("MEMPLANE_RELEASE", ""), os.environ.get("MEMPLANE_RELEASE_NAMESPACE", "")
        print(refusal(workspaces, namespaces, release, release_ns), file=sys.stderr)
        return 1
    scope = ", ".join(namespaces) if namespaces else "any namespace"
    print(f"memplane: no MemoryWorkspace in {scope}: the uninstall may proceed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
