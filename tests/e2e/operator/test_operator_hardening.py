"""What a careless or hostile tenant, and a stuck object, must not be able to do (from a
QA pass): make the operator rewrite an object in a loop, revoke another tenant's key,
wedge an object with a value the schema cannot bound, leak a sandbox claim or a replaced key."""

from __future__ import annotations

import json
from typing import Any

import httpx
import kopf
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnauthenticatedError
from memplane.v1 import admin_pb2
from memplane_operator.kube import Kube
from memplane_operator.persistence import KOPF_PREFIX
from tests.e2e.operator.kubeobjects import (
    apply,
    bind_claim,
    condition,
    event_with,
    events_during,
    events_of,
    eventually,
    get,
    secret_env,
    wait_for,
    wait_ready,
    workspace,
)
from tests.fix_kube import KubeCluster

pytestmark = pytest.mark.usefixtures("operator")
WATCH_SECONDS = 4


async def _modifications(kube: KubeCluster, namespace: str, name: str) -> int:
    """MODIFIED events of the object during a WATCH_SECONDS watch (the observation window
    of an absence: a watch, not a sleep)."""
    done = await kube.akubectl(
        "get", "memoryworkspace", name, "-n", namespace, "--watch-only", "--output-watch-events", "-o", "json",
        f"--request-timeout={WATCH_SECONDS}s", check=False, timeout=WATCH_SECONDS + 30,
    )  # fmt: skip
    decoder = json.JSONDecoder()
    text, events = done.stdout.strip(), []
    while text:
        event, end = decoder.raw_decode(text)
        events.append(event["type"])
        text = text[end:].strip()
    return events.count("MODIFIED")


async def _reconciled(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The object once its reconcile is over, as its last writes leave it: kopf's diff-base
    annotation (the spec handled, a metadata write) and then the steps' progress purged from
    the status (the status step's write). Ready=True comes before both, in the sandbox
    step's write, so a watch opened at Ready sees them. No watch reports an absence (the
    progress gone): the object is read until it is so."""

    async def over() -> dict[str, Any] | None:
        obj = await get(kube, "memoryworkspace", name, namespace)
        handled = f"{KOPF_PREFIX}/last-handled-configuration" in (obj["metadata"].get("annotations") or {})
        progress = ((obj.get("status") or {}).get("kopf") or {}).get("progress")
        return obj if handled and not progress else None

    return await eventually(over, seconds=60, what=f"the reconcile of {namespace}/{name} is over")


async def test_a_blocked_object_waits_for_its_retry_instead_of_looping(kube: KubeCluster, k8s_namespace: str) -> None:
    await kube.akubectl("create", "secret", "generic", "taken", "-n", k8s_namespace, "--from-literal=x=y")
    await apply(kube, workspace(k8s_namespace, "blocked", credentials={"secretName": "taken"}))
    await wait_for(
        kube,
        "jsonpath={.status.conditions[?(@.type=='CredentialsReady')].reason}=SecretOwnedElsewhere",
        "memoryworkspace/blocked",
        k8s_namespace,
    )
    blocked = await get(kube, "memoryworkspace", "blocked", k8s_namespace)
    assert blocked["status"]["phase"] == "Failed"
    assert condition(blocked, "Ready")["reason"] == "SecretOwnedElsewhere"  # the failing part, not "Reconciling"
    assert condition(blocked, "DatabaseReady")["status"] == "True"  # the workspace itself exists
    # The test operator resyncs every second: at most a few writes in the window, not a loop.
    assert await _modifications(kube, k8s_namespace, "blocked") <= 2 * WATCH_SECONDS

    warned = await event_with(kube, k8s_namespace, "blocked", "Conflict")  # kubectl describe shows why
    assert warned["type"] == "Warning"
    assert "taken" in warned["message"]


async def test_a_forged_annotation_cannot_revoke_another_tenants_key(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    await apply(kube, workspace(k8s_namespace, "victim"), workspace(k8s_namespace, "attacker"))
    victim = await wait_ready(kube, k8s_namespace, "victim")
    await wait_ready(kube, k8s_namespace, "attacker")
    await kube.akubectl(
        "annotate", "--overwrite", "secret", "attacker-memplane", "-n", k8s_namespace,
        f"memplane.io/previous-key-id={victim['status']['keyId']}",
        "memplane.io/previous-key-revoke-after=2000-01-01T00:00:00Z",
    )  # fmt: skip

    async def forged_annotation_handled() -> bool | None:
        secret = await get(kube, "secret", "attacker-memplane", k8s_namespace)
        return True if "memplane.io/previous-key-id" not in secret["metadata"].get("annotations", {}) else None

    await eventually(forged_annotation_handled, seconds=30, what="the resync handles the annotation")
    async with AsyncMemplaneClient.from_env(await secret_env(kube, k8s_namespace, "victim-memplane")) as agent:
        await agent.list_memories()  # the victim's key still works


async def test_values_past_what_the_schema_bounds_are_reported_and_deletable(
    kube: KubeCluster, k8s_namespace: str
) -> None:
    huge = workspace(
        k8s_namespace,
        "huge",
        quotas={"maxBytes": "8Ei"},
        retention={"rules": [{"type": "tool", "ttl": "0s"}]},
        credentials={"rotation": {"gracePeriod": "999999999d"}},
    )
    await apply(kube, huge)
    await wait_for(
        kube,
        "jsonpath={.status.conditions[?(@.type=='DatabaseReady')].reason}=InvalidSpec",
        "memoryworkspace/huge",
        k8s_namespace,
    )
    obj = await get(kube, "memoryworkspace", "huge", k8s_namespace)
    message = condition(obj, "DatabaseReady")["message"]
    for field in (
        "spec.quotas.maxBytes",
        "spec.retention.rules[type=tool].ttl",
        "spec.credentials.rotation.gracePeriod",
    ):
        assert field in message
    assert obj["status"]["phase"] == "Failed"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]  # never Ready, yet said
    warned = await event_with(kube, k8s_namespace, "huge", "InvalidSpec")
    assert warned["type"] == "Warning"
    assert "spec.quotas.maxBytes" in warned["message"]
    # One Event for the transition, none per pass: the resync looks every second meanwhile.
    assert await events_during(kube, k8s_namespace, "huge", WATCH_SECONDS) == []
    assert [e["reason"] for e in await events_of(kube, k8s_namespace, "huge")] == ["InvalidSpec"]
    await kube.akubectl("delete", "memoryworkspace", "huge", "-n", k8s_namespace, "--timeout=60s")


async def test_a_zero_default_ttl_means_forever_and_causes_no_drift(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    manifest = workspace(k8s_namespace, "forever", retention={"defaultTTL": "0s"})
    await apply(kube, manifest)
    await wait_ready(kube, k8s_namespace, "forever")
    await _reconciled(kube, k8s_namespace, "forever")
    stored = await services_admin.get_workspace(manifest["spec"]["tenantId"])
    assert stored.retention == admin_pb2.RetentionPolicy()
    # The resync looks every second: nothing to push, nothing to write.
    assert await _modifications(kube, k8s_namespace, "forever") == 0


async def test_delete_releases_the_claim_even_when_the_workspace_is_already_gone(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    files = {"apiVersion": "memplane.io/v1alpha1", "kind": "SandboxClass", "metadata": {"name": "leak-files"}}
    manifest = workspace(k8s_namespace, "gone", sandbox={"sandboxClassName": "leak-files"})
    await apply(kube, {**files, "spec": {"type": "local"}}, manifest)
    await wait_for(kube, "create", "pvc/gone-sandbox", k8s_namespace)
    await bind_claim(kube, k8s_namespace, "gone-sandbox")
    await wait_ready(kube, k8s_namespace, "gone")
    manifest["spec"]["suspend"] = True
    await apply(kube, manifest)
    await wait_for(kube, "jsonpath={.status.phase}=Suspended", "memoryworkspace/gone", k8s_namespace)
    await services_admin.delete_workspace(manifest["spec"]["tenantId"])  # behind the operator's back
    await kube.akubectl("delete", "memoryworkspace", "gone", "-n", k8s_namespace, "--timeout=60s")
    await wait_for(kube, "delete", "pvc/gone-sandbox", k8s_namespace, seconds=60)
    await kube.akubectl("delete", "sandboxclass", "leak-files")


async def test_a_replaced_key_is_revoked(
    kube: KubeCluster, k8s_namespace: str, services_admin: AsyncMemplaneClient
) -> None:
    manifest = workspace(k8s_namespace, "replaced")
    tenant = manifest["spec"]["tenantId"]
    await apply(kube, manifest)
    await wait_ready(kube, k8s_namespace, "replaced")
    old = await secret_env(kube, k8s_namespace, "replaced-memplane")
    await kube.akubectl("delete", "secret", "replaced-memplane", "-n", k8s_namespace)
    await wait_for(kube, "create", "secret/replaced-memplane", k8s_namespace, seconds=60)

    async def one_valid_key() -> bool | None:
        keys = (await services_admin.list_api_keys(tenant)).api_keys
        return True if sum(not k.HasField("revoke_time") for k in keys) == 1 else None

    await eventually(one_valid_key, seconds=30, what="the replaced key is revoked")
    async with AsyncMemplaneClient.from_env(old) as stale:
        with pytest.raises(UnauthenticatedError):
            await stale.list_memories()
    manifest["spec"]["credentials"] = {"secretName": "renamed-memplane"}  # a rename moves the key, too
    await apply(kube, manifest)
    await wait_for(kube, "jsonpath={.status.secretName}=renamed-memplane", "memoryworkspace/replaced", k8s_namespace)
    await wait_for(kube, "delete", "secret/replaced-memplane", k8s_namespace, seconds=60)
    await eventually(one_valid_key, seconds=30, what="one valid key after the rename")


def test_the_rotation_annotation_is_part_of_what_kopf_reacts_to() -> None:
    storage = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX)
    body = kopf.Body(
        {
            "metadata": {
                "name": "w",
                "annotations": {"memplane.io/rotate": "r1", f"{KOPF_PREFIX}/kopf-managed": "yes"},
            },
            "spec": {"tenantId": "w"},
        }
    )
    essence = storage.build(body=body)
    assert essence["metadata"]["annotations"] == {"memplane.io/rotate": "r1"}  # an annotation change is an update


async def test_a_dropped_api_server_connection_in_the_finalizer_is_retried_within_seconds(
    kube: KubeCluster, k8s_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API-server connection dropped while the finalizer deletes the Secret (httpx.ReadError,
    as seen in CI) is retried after a few seconds, not kopf's default 60 s: the deletion ends
    well within kubectl's 30 s wait."""
    await apply(kube, workspace(k8s_namespace, "dropped"))
    await wait_ready(kube, k8s_namespace, "dropped")
    real = Kube.delete
    dropped: list[str] = []

    async def drop_once(self: Kube, kind: Any, name: str, namespace: str | None = None) -> bool:
        if not dropped:
            dropped.append(name)
            raise httpx.ReadError("")
        return await real(self, kind, name, namespace)

    monkeypatch.setattr(Kube, "delete", drop_once)
    await kube.akubectl("delete", "memoryworkspace", "dropped", "-n", k8s_namespace, "--timeout=30s")
    assert dropped == ["dropped-memplane"]
    await wait_for(kube, "delete", "secret/dropped-memplane", k8s_namespace, seconds=30)
