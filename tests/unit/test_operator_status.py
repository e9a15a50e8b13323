"""What the operator reports of a MemoryWorkspace, in its pure parts: the phase of its
conditions, the Events their transitions call for (once each), the SandboxReady of a
local sandbox's claim, and kopf's progress records read only for their generation."""

from __future__ import annotations

from typing import Any, cast

import kopf
import pytest

from memplane_operator.conditions import CONFLICT, QUOTA_EXCEEDED, READY, SANDBOX_SYNCED, Conditions
from memplane_operator.events import EventBook, by_type, event_for
from memplane_operator.persistence import GenerationalProgressStorage
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


def _c(status: str, reason: str, message: str = "m") -> dict[str, Any]:
    return {"status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("kind", "condition", "before", "expected"),
    [
        (READY, _c("True", "Provisioned"), None, ("Normal", "Ready")),
        (READY, _c("True", "Provisioned"), ("True", "Provisioned"), None),  # no transition
        (READY, _c("False", "Reconciling"), ("True", "Provisioned"), None),  # the steps at work
        (READY, _c("False", "InvalidSpec"), ("False", "Reconciling"), ("Warning", "InvalidSpec")),
        (READY, _c("False", "EmbeddingMismatch"), None, ("Warning", "InvalidSpec")),
        (READY, _c("False", "Conflict"), None, ("Warning", "Conflict")),
        (READY, _c("False", "SecretOwnedElsewhere"), None, ("Warning", "Conflict")),
        (READY, _c("False", "SandboxClassNotFound"), None, ("Warning", "SandboxFailed")),
        (READY, _c("False", "ClaimPending"), None, ("Normal", "SandboxPending")),
        (READY, _c("False", "PodNotReady"), ("False", "ClaimPending"), ("Normal", "SandboxPending")),
        (READY, _c("False", "ServiceUnavailable"), ("True", "Provisioned"), ("Warning", "ServiceUnavailable")),
        (READY, _c("False", "SomethingNew"), None, ("Warning", "NotReady")),  # the table's default
        (QUOTA_EXCEEDED, _c("True", "QuotaReached"), ("False", "WithinQuota"), ("Warning", "QuotaExceeded")),
        (QUOTA_EXCEEDED, _c("False", "WithinQuota"), ("True", "QuotaReached"), ("Normal", "WithinQuota")),
        (QUOTA_EXCEEDED, _c("False", "WithinQuota"), None, None),  # recovered from nothing
        (SANDBOX_SYNCED, _c("False", "SyncLocked"), ("True", "Synced"), ("Warning", "SyncFailed")),
        (SANDBOX_SYNCED, _c("False", "TimedOut"), ("False", "SyncLocked"), ("Warning", "SyncFailed")),
        (SANDBOX_SYNCED, _c("True", "Synced"), ("False", "TimedOut"), ("Normal", "Synced")),
        (SANDBOX_SYNCED, _c("True", "SyncedWithProblems"), ("True", "Synced"), None),
    ],
)
def test_events_of_transitions(
    kind: str, condition: dict[str, Any], before: tuple[str, str] | None, expected: tuple[str, str] | None
) -> None:
    assert event_for(kind, condition, before) == expected


def test_an_event_is_posted_once_per_transition_whatever_body_a_pass_read() -> None:
    book = EventBook()
    body = {"apiVersion": "memplane.io/v1alpha1", "kind": "MemoryWorkspace", "metadata": {"uid": "u1"}}
    failing = by_type([{"type": READY, **_c("False", "InvalidSpec", "spec.quotas.maxBytes: too large")}])
    assert book.note(body, {}, failing) == [("Warning", "InvalidSpec", "spec.quotas.maxBytes: too large")]
    assert book.note(body, {}, failing) == []  # a retry, a resync pass that read the older body
    ready = by_type([{"type": READY, **_c("True", "Provisioned", "ready")}])
    assert book.note(body, failing, ready) == [("Normal", "Ready", "ready")]
    restarted = EventBook()  # a new process: the body read is the memory
    assert restarted.note(body, ready, ready) == []
    book.forget("u1")
    assert book.note(body, {}, ready) == [("Normal", "Ready", "ready")]


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


def _body(generation: int, progress: dict[str, Any] | None = None) -> kopf.Body:
    status = {"kopf": {"progress": progress}} if progress else {}
    return kopf.Body(cast(kopf.RawBody, {"metadata": {"name": "w", "generation": generation}, "status": status}))


def test_progress_is_kept_in_the_status_and_read_only_for_its_generation() -> None:
    storage = GenerationalProgressStorage(generational=["reconcile"])
    record: kopf.ProgressRecord = {"started": "2026-01-01T00:00:00", "success": True}
    patch = kopf.Patch()
    storage.store(key=kopf.HandlerId("reconcile/workspace"), record=record, body=_body(1), patch=patch)
    storage.store(key=kopf.HandlerId("release"), record=record, body=_body(1), patch=patch)
    stored = dict(patch)["status"]["kopf"]["progress"]  # beside the conditions: one status write
    assert stored["reconcile/workspace"]["generation"] == 1
    assert "generation" not in stored["release"]  # the finalizer's records are not per spec
    same = _body(1, stored)
    assert storage.fetch(key=kopf.HandlerId("reconcile/workspace"), body=same) is not None
    edited = _body(2, stored)  # the spec changed: the reconcile starts afresh
    assert storage.fetch(key=kopf.HandlerId("reconcile/workspace"), body=edited) is None
    assert storage.fetch(key=kopf.HandlerId("release"), body=edited) is not None


def test_a_progress_record_reads_back_as_kopf_stored_it() -> None:
    # kopf writes back each record that differs from the one it read: with the stamp read
    # back, every cycle wrote the same records again, a patch that changes nothing and so
    # brings no watch event, and kopf waited for one instead of sleeping out a step's delay.
    storage = GenerationalProgressStorage(generational=["reconcile"])
    record: kopf.ProgressRecord = {"started": "2026-01-01T00:00:00", "delayed": "2026-01-01T00:00:01", "retries": 1}
    patch = kopf.Patch()
    storage.store(key=kopf.HandlerId("reconcile"), record=record, body=_body(3), patch=patch)
    stored = _body(3, dict(patch)["status"]["kopf"]["progress"])
    assert storage.fetch(key=kopf.HandlerId("reconcile"), body=stored) == record
