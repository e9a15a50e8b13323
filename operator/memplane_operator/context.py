"""What every reconcile step works with: the object, its parsed spec, its conditions and
status being written, and the clients (AdminService, Kubernetes) shared by the process."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memplane.client import AsyncMemplaneClient
from memplane_operator.backends import Backends
from memplane_operator.conditions import READY, Conditions
from memplane_operator.events import EventBook
from memplane_operator.kube import Kube
from memplane_operator.model import WorkspaceSpec
from memplane_operator.settings import OperatorSettings
from memplane_operator.sync.state import SyncBook

FINALIZER = "memplane.io/workspace-protection"
ROTATE_ANNOTATION = "memplane.io/rotate"  # set to any new value to rotate the API key
OWNER_LABELS = ("memplane.io/namespace", "memplane.io/name", "memplane.io/uid")


@dataclass
class Runtime:
    """Process-wide state, made at startup (kopf's memo): clients, settings and one lock per
    MemoryWorkspace, so a timer never reconciles an object while a change handler does; the
    open sandbox backends and, per MemoryWorkspace uid, how many sandbox calls in a row
    found the backend unavailable (the retry backoff); the file sync's book (`syncs`); the
    Events posted per object (`events`); the status each object's last pass wrote (`statuses`)."""

    settings: OperatorSettings
    admin: AsyncMemplaneClient
    kube: Kube
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    sandboxes: Backends = field(default_factory=Backends)
    sandbox_failures: dict[str, int] = field(default_factory=dict)
    syncs: SyncBook = field(default_factory=SyncBook)
    events: EventBook = field(default_factory=EventBook)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)

    def lock(self, uid: str) -> asyncio.Lock:
        """The lock of the object with *uid*."""
        return self.locks.setdefault(uid, asyncio.Lock())

    def wrote(self, uid: str, status: Mapping[str, Any]) -> None:
        """Remember *status*, what a pass of this process just gave kopf to write into the
        status of the object *uid* (status.sandbox aside: the sync book keeps it)."""
        self.statuses[uid] = copy.deepcopy({key: value for key, value in status.items() if key != "sandbox"})

    def status(self, uid: str, observed: Mapping[str, Any]) -> dict[str, Any]:
        """The status of the object *uid* as this process knows it: *observed* (as read),
        with what its last pass wrote over it. kopf hands a handler and the resync timer a
        body refreshed only by the object's next watch event, and applies a handler's patch
        after the handler returns, outside the object's lock: a resync pass that waited for
        the lock while a reconcile cycle ran read the status from before that cycle's write
        and wrote again what the cycle had just written, stamped anew (usage.measuredTime,
        the lastTransitionTime of a condition the cycle set first) — a second write of an
        object already settled. Only this process's passes write these fields, so the last
        one written is the newest."""
        return {**observed, **self.statuses.get(uid, {})}


class StepBlocked(Exception):  # noqa: N818 - a control-flow signal, not an error of the operator
    """A step found a state only a person can fix (recorded in a condition); later steps
    must not run until then. Not retried by kopf: the resync timer looks again."""


@dataclass
class Ctx:
    """One reconcile of one MemoryWorkspace."""

    runtime: Runtime
    name: str
    namespace: str
    uid: str
    generation: int
    annotations: Mapping[str, str]
    spec: WorkspaceSpec
    conditions: Conditions
    logger: logging.Logger | logging.LoggerAdapter[Any]
    observed: Mapping[str, Any] = field(default_factory=dict)  # .status as read
    status: dict[str, Any] = field(default_factory=dict)  # .status fields to write
    retry_after: float | None = None  # seconds until a failed step should run again
    blocked: bool = False  # a step found a state only a person can fix (StepBlocked)
    deleting: bool = False

    def recorded_sandbox(self) -> dict[str, Any]:
        """status.sandbox as this process last wrote it over the one read (see
        `memplane_operator.sync.state`): what a pass acts on, never an older state."""
        return self.runtime.syncs.sandbox(self.uid, self.observed.get("sandbox"))

    @property
    def owner_labels(self) -> dict[str, str]:
        """Labels the operator puts on the memplane workspace it provisions for this object."""
        return dict(zip(OWNER_LABELS, (self.namespace, self.name, self.uid), strict=True))

    @property
    def key_display_name(self) -> str:
        """Display name of the API keys made for this object (ListApiKeys finds them by it)."""
        return f"memplane-operator {self.namespace}/{self.name}"

    def owner_reference(self) -> dict[str, Any]:
        """An ownerReference to this MemoryWorkspace (its Secret is garbage-collected with it)."""
        return {
            "apiVersion": "memplane.io/v1alpha1",
            "kind": "MemoryWorkspace",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def status_patch(self) -> dict[str, Any]:
        """Everything to write into .status: the fields steps set, the conditions, the phase,
        and observedGeneration — the generation this status was computed for, in every
        write from the first (Ready or not; Ready=True only in the same patch as the
        generation it is for). The SandboxSynced the file sync last wrote is taken as it is
        now (a pass may have ended while this reconcile ran); SandboxReady is this pass's
        own (`steps.context` put in the one last recorded, and the pass holds the object's
        lock)."""
        self.runtime.syncs.overlay(self.uid, self.conditions, ready=False)
        return {
            **self.status,
            "observedGeneration": self.generation,
            "conditions": self.conditions.as_list(),
            "phase": self.conditions.phase(suspended=self.spec.suspend, deleting=self.deleting, served=self.served),
        }

    @property
    def served(self) -> bool:
        """Whether the object was Ready, or Degraded, as read: a part failing now degrades it."""
        was = {str(c.get("type")): str(c.get("status")) for c in self.observed.get("conditions") or []}
        return was.get(READY) == "True" or self.observed.get("phase") == "Degraded"
