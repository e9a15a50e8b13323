"""What the operator reports of a MemoryWorkspace, in its pure parts: the phase of its
conditions, and the SandboxReady of a local sandbox's claim."""

from __future__ import annotations

from typing import Any

from memplane_operator.conditions import CONFLICT, Conditions
from memplane_operator.sandbox import claim_condition


def _conditions(**parts: tuple[bool, str]) -> Conditions:
    c = Conditions([], generation=1)
    for kind, (status, reason) in parts.items():
        c.set(kind, status, reason, "why")
    return c


def test_phases_separate_failed_from_degraded_and_pending() -> None:
    assert Conditions([], generation=1).phase() == "Pending"  # nothing done yet
    working = _conditions(DatabaseReady=(True, "Provisioned"))
    assert working.phase() == "Provisioning"  # the steps at work, nothing failed
    ready = _conditions(
        DatabaseReady=(True, "Provisioned"), CredentialsReady=(True, "Issued"), SandboxReady=(True, "NoSandbox")
    )
    assert ready.phase() == "Ready"
    starting = _conditions(DatabaseReady=(True, "Provisioned"), SandboxReady=(False, "PodNotReady"))
    assert starting.phase() == "Pending"  # waiting for what comes by itself ...
    assert starting.phase(served=True) == "Degraded"  # ... or, once served, a part unhealthy
    unreachable = _conditions(DatabaseReady=(False, "ServiceUnavailable"))
    assert (unreachable.phase(), unreachable.phase(served=True)) == ("Pending", "Degraded")
    for reason in ("InvalidSpec", "DuplicateTenantId", "SandboxClassNotFound", "ClaimLost"):
        assert _conditions(DatabaseReady=(False, reason)).phase(served=True) == "Failed"  # a person must act
    conflict = _conditions(DatabaseReady=(False, "WorkspaceOwnedElsewhere"))
    conflict.set(CONFLICT, True, "WorkspaceOwnedElsewhere")
    assert conflict.phase() == "Failed"
    assert ready.phase(suspended=True) == "Suspended"
    assert ready.phase(deleting=True) == "Deleting"


def _claim(phase: str, storage_class: str | None) -> dict[str, Any]:
    spec = {"storageClassName": storage_class} if storage_class else {}
    return {"spec": spec, "status": {"phase": phase}}


def test_a_local_sandbox_is_ready_once_its_claim_binds_or_waits_for_its_first_consumer() -> None:
    immediate = {"provisioner": "example.com/disk", "volumeBindingMode": "Immediate"}
    later = {"provisioner": "example.com/disk", "volumeBindingMode": "WaitForFirstConsumer"}
    assert claim_condition("w-sandbox", _claim("Bound", "fast"), immediate, "1Gi") == (
        True,
        "Provisioned",
        "PersistentVolumeClaim w-sandbox (Bound, 1Gi)",
    )
    ready, reason, message = claim_condition("w-sandbox", _claim("Pending", "fast"), later, "1Gi")
    assert (ready, reason) == (True, "WaitingForFirstConsumer")
    assert "binds when the first Pod that mounts it is scheduled" in message
    for claim, storage_class, says in (
        (_claim("Pending", None), None, "is not bound: it names no StorageClass and the cluster has no default one"),
        (_claim("Pending", "fast"), None, "is not bound: it asks for StorageClass 'fast', which does not exist"),
        (_claim("Pending", "fast"), immediate, "is not bound yet (StorageClass 'fast', provisioner example.com/disk)"),
    ):
        ready, reason, message = claim_condition("w-sandbox", claim, storage_class, "1Gi")
        assert (ready, reason) == (False, "ClaimPending")
        assert message == f"PersistentVolumeClaim w-sandbox {says}"
    assert claim_condition("w-sandbox", _claim("Lost", "fast"), immediate, "1Gi")[:2] == (False, "ClaimLost")
