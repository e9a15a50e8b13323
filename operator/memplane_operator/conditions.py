"""Status conditions of a MemoryWorkspace, kept as Kubernetes API conventions say:
metav1.Condition fields, `lastTransitionTime` changed only when the status changes, each
condition stamped with the generation it was computed for, and `Ready` derived from the
parts — True only when every part is True for the current generation."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
DATABASE_READY = "DatabaseReady"
CREDENTIALS_READY = "CredentialsReady"
SANDBOX_READY = "SandboxReady"
QUOTA_EXCEEDED = "QuotaExceeded"
CONFLICT = "Conflict"
SANDBOX_SYNCED = "SandboxSynced"  # informational: the operator's file sync (not a part of Ready)
PARTS = (DATABASE_READY, CREDENTIALS_READY, SANDBOX_READY)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Conditions:
    """The conditions list of one object at one generation, edited in place and written
    back whole (`as_list`): a merge patch replaces a list, never merges it."""

    def __init__(self, existing: Iterable[Mapping[str, Any]], generation: int) -> None:
        self._by_type: dict[str, dict[str, Any]] = {c["type"]: copy.deepcopy(dict(c)) for c in existing}
        self.generation = generation

    def get(self, kind: str) -> dict[str, Any] | None:
        """The condition of *kind*, if set."""
        return self._by_type.get(kind)

    def is_true(self, kind: str, *, current: bool = False) -> bool:
        """Whether *kind* is True (and, with *current*, computed for this generation)."""
        c = self._by_type.get(kind)
        if c is None or c["status"] != "True":
            return False
        return not current or c.get("observedGeneration") == self.generation

    def set(self, kind: str, status: bool | None, reason: str, message: str = "", *, derive: bool = True) -> None:
        """Set *kind* to True / False / Unknown (None); keep lastTransitionTime unless the
        status changes. Ready is recomputed after each part (unless not *derive*: a writer
        that read the other conditions but does not own Ready, the file sync)."""
        value = "Unknown" if status is None else str(bool(status))
        old = self._by_type.get(kind)
        changed = old is None or old["status"] != value
        self._by_type[kind] = {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": _now() if changed or old is None else old["lastTransitionTime"],
            "observedGeneration": self.generation,
        }
        if kind != READY and derive:
            self._derive_ready()

    def put(self, kind: str, condition: Mapping[str, Any] | None, *, derive: bool = False) -> None:
        """Replace *kind* with *condition* as another writer computed it (None: remove it);
        Ready is recomputed only with *derive* (a part another pass decided)."""
        if condition is None:
            self._by_type.pop(kind, None)
        else:
            self._by_type[kind] = copy.deepcopy(dict(condition))
        if derive and kind != READY:
            self._derive_ready()

    def _derive_ready(self) -> None:
        if self.is_true(CONFLICT):
            conflict = self._by_type[CONFLICT]
            self.set(READY, False, CONFLICT, conflict["message"])
            return
        waiting = [p for p in PARTS if not self.is_true(p, current=True)]
        if not waiting:
            self.set(READY, True, "Provisioned", "the workspace, its credentials and its sandbox are ready")
            return
        failing = [self._by_type[p] for p in waiting if self._by_type.get(p, {}).get("status") == "False"]
        if failing:  # the first part that failed says why
            self.set(READY, False, failing[0]["reason"], f"{failing[0]['type']}: {failing[0]['message']}")
            return
        self.set(READY, False, "Reconciling", "waiting for " + ", ".join(waiting))

    def as_list(self) -> list[dict[str, Any]]:
        """Conditions in a stable order: Ready, the parts, then the rest."""
        order = {kind: i for i, kind in enumerate((READY, *PARTS, SANDBOX_SYNCED, QUOTA_EXCEEDED, CONFLICT))}
        return sorted(self._by_type.values(), key=lambda c: (order.get(c["type"], len(order)), c["type"]))

    def phase(self, *, suspended: bool = False, deleting: bool = False, served: bool = False) -> str:
        """A one-word summary for `kubectl get` (the conditions carry the detail; `PHASES`
        says what each means). *served*: the object was Ready, or Degraded, before this pass."""
        if deleting:
            return "Deleting"
        if suspended:
            return "Suspended"
        if self.is_true(READY):
            return "Ready"
        unhealthy = [c for p in PARTS if (c := self._by_type.get(p)) is not None and c["status"] == "False"]
        if self.is_true(CONFLICT) or any(c["reason"] in FAILED_REASONS for c in unhealthy):
            return "Failed"
        if unhealthy:
            return "Degraded" if served else "Pending"
        return "Provisioning" if any(p in self._by_type for p in PARTS) else "Pending"


# The phases, as the CRD documents them (memplane_operator.crds).
PHASES: dict[str, str] = {
    "Pending": "nothing is provisioned yet, or a part waits for something that comes by itself (a claim to bind, "
    "a sandbox Pod to start, the services or a sandbox backend to answer)",
    "Provisioning": "the operator is applying the spec, of a new object or a changed one, and nothing has failed",
    "Ready": "every part is ready for the current spec",
    "Degraded": "the workspace was Ready and a part is unhealthy now (the services or a sandbox backend "
    "unreachable, its sandbox restarting), which the operator retries by itself",
    "Failed": "the operator cannot go on without a person (an invalid spec, a tenantId or Secret that belongs to "
    "another object, a SandboxClass that is missing or refuses the workspace, a lost volume, a rejected admin key)",
    "Suspended": "spec.suspend is true and changes are not applied",
    "Deleting": "the object is being deleted and its finalizer waits (the services or a sandbox backend unreachable)",
}

# Reasons after which only a change (to the spec, a SandboxClass, the services' admin key,
# another object) helps: the phase is Failed.
FAILED_REASONS = frozenset(
    {
        "EmbeddingMismatch",
        "SecretOwnedElsewhere",
        "WorkspaceOwnedElsewhere",
        "DuplicateTenantId",
        "SandboxClassNotFound",
        "NamespaceNotAllowed",
        "Unsupported",
        "InvalidSpec",
        "RejectedByServices",
        "InvalidParameters",
        "BackendRefused",
        "ClaimLost",
        "AdminKeyRejected",
    }
)
