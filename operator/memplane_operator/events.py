"""Kubernetes Events of a MemoryWorkspace, as `kubectl describe` shows them: type Normal or
Warning, a reason from one small table (`REASONS`), posted once per transition of what the
object reports — Ready (whose reason is the first failing part's), QuotaExceeded and
SandboxSynced — never once per retry or per resync pass.

kopf's own posting of log records ("Logging" Events typed after the log level, one per
handler failure and retry) is off (`memplane_operator.persistence.configure`); these are
posted with `kopf.event`, in the background, by kopf's poster. Which transitions were
posted is remembered per object (`EventBook`), so passes that read an older body (a timer,
the file sync) do not post one again; after a restart the body's conditions are the memory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from memplane_operator.conditions import QUOTA_EXCEEDED, READY, SANDBOX_SYNCED

NORMAL, WARNING = "Normal", "Warning"
log = logging.getLogger(__name__)

# Ready=False's reason (a part's reason, or Ready's own) -> (Event type, Event reason). One
# table; a reason it does not name reads as (Warning, "NotReady").
REASONS: dict[str, tuple[str, str]] = {
    # only an edit of the spec helps
    "InvalidSpec": (WARNING, "InvalidSpec"),
    "EmbeddingMismatch": (WARNING, "InvalidSpec"),
    "RejectedByServices": (WARNING, "InvalidSpec"),
    # something else holds what the object asks for
    "Conflict": (WARNING, "Conflict"),
    "DuplicateTenantId": (WARNING, "Conflict"),
    "WorkspaceOwnedElsewhere": (WARNING, "Conflict"),
    "SecretOwnedElsewhere": (WARNING, "Conflict"),
    # the sandbox cannot be made as the class says
    "SandboxClassNotFound": (WARNING, "SandboxFailed"),
    "NamespaceNotAllowed": (WARNING, "SandboxFailed"),
    "Unsupported": (WARNING, "SandboxFailed"),
    "InvalidParameters": (WARNING, "SandboxFailed"),
    "BackendRefused": (WARNING, "SandboxFailed"),
    "ClaimLost": (WARNING, "SandboxFailed"),
    # out of reach for now: retried
    "BackendUnavailable": (WARNING, "SandboxUnavailable"),
    "ServiceUnavailable": (WARNING, "ServiceUnavailable"),
    "ServiceError": (WARNING, "ServiceError"),
    "AdminKeyRejected": (WARNING, "AdminKeyRejected"),
    # waiting for what comes by itself
    "PodNotReady": (NORMAL, "SandboxPending"),
    "ClaimPending": (NORMAL, "SandboxPending"),
    "Reconciling": (NORMAL, ""),  # the steps at work: no Event
    # asked for
    "Suspended": (NORMAL, "Suspended"),
    "Deleting": (WARNING, "DeletionBlocked"),
}
READY_EVENT = (NORMAL, "Ready")
NOT_READY_EVENT = (WARNING, "NotReady")
QUOTA_EVENTS = {"True": (WARNING, "QuotaExceeded"), "False": (NORMAL, "WithinQuota")}
SYNC_EVENTS = {"True": (NORMAL, "Synced"), "False": (WARNING, "SyncFailed")}
WATCHED = (READY, QUOTA_EXCEEDED, SANDBOX_SYNCED)

Key = tuple[str, str]  # (status, reason) of a condition


def event_for(kind: str, condition: Mapping[str, Any], before: Key | None) -> tuple[str, str] | None:
    """(type, reason) of the Event for condition *kind* now reading *condition* after
    *before* (None: not set before); None when nothing is to be posted: no change, a state
    that needs none (Reconciling), or a good state that follows no bad one (a first
    WithinQuota or Synced)."""
    status, reason = str(condition.get("status")), str(condition.get("reason"))
    if (status, reason) == before:
        return None
    if kind == READY:
        ready = READY_EVENT if status == "True" else REASONS.get(reason, NOT_READY_EVENT)
        return ready if ready[1] else None
    found = (QUOTA_EVENTS if kind == QUOTA_EXCEEDED else SYNC_EVENTS).get(status)
    if found is None or (found[0] == NORMAL and (before is None or before[0] == status)):
        return None  # recovered from nothing, or only the reason of a good state changed
    return found


@dataclass
class EventBook:
    """Per object uid, the (status, reason) of each watched condition as last posted."""

    posted: dict[str, dict[str, Key]] = field(default_factory=dict)

    def note(
        self,
        body: Mapping[str, Any],
        before: Mapping[str, Mapping[str, Any]],
        after: Mapping[str, Mapping[str, Any]],
    ) -> list[tuple[str, str, str]]:
        """The Events (type, reason, message) that the watched conditions *after* call for,
        given what this process last posted for the object *body* (else the conditions
        *before*, as read), remembered as posted; also posts them (`post`)."""
        uid = str(body["metadata"]["uid"])
        seen = self.posted.setdefault(uid, {})
        due: list[tuple[str, str, str]] = []
        for kind in WATCHED:
            condition = after.get(kind)
            if condition is None:
                continue
            earlier = before.get(kind)
            last = seen.get(kind) or ((str(earlier["status"]), str(earlier["reason"])) if earlier else None)
            found = event_for(kind, condition, last)
            seen[kind] = (str(condition["status"]), str(condition["reason"]))
            if found is not None:
                due.append((*found, str(condition.get("message") or "")))
        post(body, due)
        return due

    def forget(self, uid: str) -> None:
        """Drop what is remembered of the object *uid* (deleted)."""
        self.posted.pop(uid, None)


def by_type(conditions: Any) -> dict[str, Mapping[str, Any]]:
    """A status's conditions list as {type: condition}."""
    return {str(c["type"]): c for c in conditions or []}


def post(body: Mapping[str, Any], events: list[tuple[str, str, str]]) -> None:
    """Queue *events* (type, reason, message) for kopf's poster. Outside a running operator
    (a step called directly) there is no poster: nothing is posted."""
    for kind, reason, message in events:
        try:
            # A kopf.Body, or the object as the API server returned it: both are mappings of
            # apiVersion, kind and metadata, all kopf reads of it (kopf types it as Body).
            kopf.event(body, type=kind, reason=reason, message=message)  # type: ignore[arg-type]
        except LookupError:  # no operator context (kopf's settings_var unset)
            log.debug("no operator to post %s %s", kind, reason)
