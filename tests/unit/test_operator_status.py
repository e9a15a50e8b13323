"""What the operator reports of a MemoryWorkspace, in its pure parts: the SandboxReady of
a local sandbox's claim."""

from __future__ import annotations

from typing import Any

from memplane_operator.sandbox import claim_condition


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
