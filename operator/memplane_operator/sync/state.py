"""What the operator's file sync keeps per MemoryWorkspace between passes, and the pure
rules it follows: the interval, what counts as activity, the SandboxSynced condition's
reason and message. The passes themselves: `memplane_operator.sync.passes`.

The reconcile and the sync write the same `status`: the reconcile writes the conditions
list whole (a merge patch replaces a list), so a pass's SandboxSynced written in between
would be overwritten by the older one the reconcile read. The book keeps the latest one
written (`SyncSlot.condition`) and `SyncBook.overlay` puts it into every Conditions the
reconcile builds and again into the status patch it writes (`Ctx.status_patch`), so the
reconcile does not take back what the sync wrote (but for a pass ending between that
patch and kopf's write of it: the next resync writes the newer one). The sandbox step
records there what it left the sandbox in (`state`, `ref`, `root`), under the object's
lock: a pass starts only on a Running sandbox, and no idle suspend happens while a pass
is in flight (`in_flight`), so the sync never wakes a suspended sandbox.

The sandbox step's own outcome is kept the same way (`SyncBook.record`): status.sandbox
as it last wrote it (`SyncSlot.sandbox`) and its SandboxReady (`SyncSlot.ready`). kopf
hands a change handler and a timer of one object the same body, refreshed only when the
object's next watch event is processed, and applies a handler's patch after the handler
returns, outside the object's lock; so a reconcile cycle that runs just after a resync
pass (or the reverse) reads a status older than the one that pass decided. Every pass
therefore reads the sandbox through the book (`SyncBook.sandbox`, `SyncBook.overlay`):
what this process last wrote wins over the body, and a pass never acts on, nor writes
back, a sandbox state older than one this process already wrote (the body stands until
the first sandbox step after a restart). Re-reading the object under the lock would not
do: the pass that released the lock may not have had its patch applied yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memplane.errors import (
    DeadlineExceededError,
    KeyRevokedError,
    MemplaneError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
)
from memplane.filesync import SyncReport
from memplane.filesync.lock import SyncLockedError
from memplane.filesync.state import ERRORS_FILE
from memplane.sandbox.errors import (
    SandboxExecTimeoutError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
    SandboxNotReadyError,
    SandboxPathError,
)
from memplane_operator.backends.base import Adapter, BackendRefusedError
from memplane_operator.conditions import SANDBOX_READY, SANDBOX_SYNCED, Conditions
from memplane_operator.model import parse_duration

DEFAULT_CONCURRENCY = 4
MAX_PROBLEMS_SHOWN = 5  # files named in the condition's message (all of them are in ERRORS_FILE)
_SANDBOX_ERRORS = (
    SandboxExecTimeoutError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
    SandboxNotReadyError,
    SandboxPathError,
)


@dataclass
class SyncSlot:
    """One MemoryWorkspace's sync, as this process knows it. *state*, *ref*, *root*: the
    sandbox as the sandbox step last left it ("": not seen since the operator started;
    status.sandbox then stands). *condition*: SandboxSynced as last written, once *decided*
    (None: absent). *last_edit*: when a pass last found an edit made in the sandbox.
    *problems*: the files the last pass left as they are (None before the first pass).
    *sandbox*: status.sandbox as the sandbox step last wrote it, its patches merged as the
    API server merges them (None: not written since the operator started). *ready*:
    SandboxReady as the sandbox step last left it (None: not decided since the start)."""

    state: str = ""
    ref: str = ""
    root: str = ""
    in_flight: bool = False
    decided: bool = False
    condition: dict[str, Any] | None = None
    last_edit: datetime | None = None
    problems: frozenset[str] | None = None
    sandbox: dict[str, Any] | None = None
    ready: dict[str, Any] | None = None


@dataclass
class SyncBook:
    """The slots of every MemoryWorkspace (by uid) and the gate bounding how many passes
    the process runs at once (*concurrency*)."""

    concurrency: int = DEFAULT_CONCURRENCY
    slots: dict[str, SyncSlot] = field(default_factory=dict)
    gate: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.gate = asyncio.Semaphore(self.concurrency)

    def slot(self, uid: str) -> SyncSlot:
        """The slot of the object *uid* (made empty on first use)."""
        return self.slots.setdefault(uid, SyncSlot())

    def forget(self, uid: str) -> None:
        """Drop the slot of a deleted object."""
        self.slots.pop(uid, None)

    def overlay(self, uid: str, conditions: Conditions, *, ready: bool = True) -> None:
        """Put the SandboxSynced this process last wrote for *uid* into *conditions* and, with
        *ready*, the SandboxReady its sandbox step last set (Ready derived again from it)."""
        found = self.slots.get(uid)
        if found is not None and found.decided:
            conditions.put(SANDBOX_SYNCED, found.condition)
        if ready and found is not None and found.ready is not None:
            conditions.put(SANDBOX_READY, found.ready, derive=True)

    def record(self, uid: str, sandbox: Mapping[str, Any] | None, ready: Mapping[str, Any] | None) -> None:
        """What the sandbox step of *uid* just wrote: the status.sandbox fields *sandbox*
        (a merge patch: None removes a field; None for no write) and SandboxReady *ready*."""
        slot = self.slot(uid)
        if sandbox is not None:
            slot.sandbox = {**(slot.sandbox or {}), **sandbox}
        if ready is not None:
            slot.ready = dict(ready)

    def sandbox(self, uid: str, observed: Mapping[str, Any] | None) -> dict[str, Any]:
        """status.sandbox of *uid* as this process knows it: *observed* (as read), what the
        sandbox step last wrote over it, the later lastActivityTime of the two (the file
        sync writes one too) unless the step cleared it, fields written as null left out."""
        read = dict(observed or {})
        found = self.slots.get(uid)
        if found is None or found.sandbox is None:
            return read
        merged = {**read, **found.sandbox}
        times = [str(t) for t in (read.get("lastActivityTime"), found.sandbox.get("lastActivityTime")) if t]
        if times and merged.get("lastActivityTime", "") is not None:  # written as null: cleared, not older
            merged["lastActivityTime"] = max(times)  # RFC 3339 UTC, whole seconds: ordered as text
        return {key: value for key, value in merged.items() if value is not None}


def interval_seconds(workspace: str, class_spec: Mapping[str, Any], default: float) -> float | None:
    """Seconds between passes: the workspace's spec.sandbox.syncInterval, else the class's
    spec.syncInterval, else *default* (the operator's setting). None: no sync ("0s", or a
    default of 0). Durations are DURATION_PATTERN strings the API server checked; raises
    `ValueError` for one that is not."""
    text = workspace or str(class_spec.get("syncInterval") or "")
    seconds = float(parse_duration(text)) if text else default
    return seconds if seconds > 0 else None


def found_edits(report: SyncReport, before: frozenset[str] | None) -> bool:
    """Whether a pass found something the sandbox's user did (activity): a memory file
    edited, added or deleted (taken back, or kept as a conflict), or a file newly left as
    it is (a malformed one; *before*: those of the previous pass, None for the first pass
    of this process, whose problems may predate it). What the pass itself wrote is not."""
    if report.changed_memories():
        return True
    return before is not None and bool(set(report.problems) - before)


def summary(report: SyncReport) -> str:
    """The SandboxSynced message of a pass: files written and removed, edits taken back,
    and the problems left in Memory/.memplane-errors.md (at most MAX_PROBLEMS_SHOWN named)."""
    edits = len(report.updated) + len(report.added) + len(report.deleted) + len(report.conflicts)
    text = (
        f"{len(report.written)} files written, {len(report.removed)} removed; {edits} edits taken back "
        f"({len(report.updated)} updated, {len(report.added)} added, {len(report.deleted)} deleted, "
        f"{len(report.conflicts)} conflicts)"
    )
    if not report.problems:
        return text
    shown = sorted(report.problems.items())[:MAX_PROBLEMS_SHOWN]
    more = len(report.problems) - len(shown)
    named = "; ".join(f"{path}: {why}" for path, why in shown) + (f"; and {more} more" if more else "")
    return f"{text}; {len(report.problems)} files left as they are, listed in {ERRORS_FILE}: {named}"


@dataclass(frozen=True)
class Failure:
    """A pass that failed, as SandboxSynced=False: *reason* and *message*."""

    reason: str
    message: str


def failure(error: BaseException, adapter: Adapter | None) -> Failure:
    """*error* from a pass as SandboxSynced=False. Reasons: TimedOut (the pass's deadline),
    SyncLocked (another pass held the sandbox), BackendUnavailable / BackendRefused (the
    sandbox backend, as its *adapter* reads the error), SandboxError (the sandbox refused a
    file or a command), KeyRejected (the workspace's key refused), ServiceUnavailable (the
    services unreachable or past a deadline), ServiceError (another error of the services),
    SyncFailed (anything else)."""
    text = str(error) or type(error).__name__
    for kinds, reason, says in _FIRST:
        if isinstance(error, kinds):
            return Failure(reason, says.format(text=text, kind=type(error).__name__))
    mapped = adapter.classify(error) if adapter is not None else None
    if mapped is not None:
        refused = isinstance(mapped, BackendRefusedError)
        return Failure("BackendRefused" if refused else "BackendUnavailable", str(mapped))
    for kinds, reason, says in _THEN:
        if isinstance(error, kinds):
            return Failure(reason, says.format(text=text, kind=type(error).__name__))
    return Failure("SyncFailed", f"{type(error).__name__}: {text}")


_Reading = tuple[tuple[type[BaseException], ...], str, str]  # error classes, reason, message
# Tried before the adapter's reading (TimeoutError is an OSError, KeyRevokedError a
# FailedPreconditionError, which the adapters read as their own) ...
_FIRST: tuple[_Reading, ...] = (
    ((TimeoutError,), "TimedOut", "{text}"),
    ((SyncLockedError,), "SyncLocked", "{text}"),
    ((UnauthenticatedError, PermissionDeniedError, KeyRevokedError), "KeyRejected",
     "the services refused the workspace's key: {text}"),
)  # fmt: skip
# ... and after it (SandboxExecTimeoutError is a DeadlineExceededError: sandbox errors first).
_THEN: tuple[_Reading, ...] = (
    (_SANDBOX_ERRORS, "SandboxError", "{kind}: {text}"),
    ((UnavailableError, DeadlineExceededError), "ServiceUnavailable", "the memplane services are unreachable: {text}"),
    ((MemplaneError,), "ServiceError", "{kind}: {text}"),
)
