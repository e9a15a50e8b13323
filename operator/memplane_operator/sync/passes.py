"""The operator's file sync: every running docker, pod or e2b sandbox gets its workspace's
Markdown view (`Memory/`) rendered in, and the edits made there taken back, by
`memplane.filesync.sync_once` — the same client-side pass as `memplane sync` — over the
client SDK with the workspace's own API key (read from its credentials Secret on every
pass, kept in memory only) against the services' address agents use
(`OperatorSettings.sync_targets`).

`tick` is one turn of a MemoryWorkspace's sync loop (a kopf daemon, `handlers.sync_daemon`):
it runs a pass when one is due and returns the seconds until the next turn. Bounds: one
pass at a time per workspace (its loop, and the sandbox's own lock,
`memplane.filesync.lock`), `sandbox_sync_timeout_seconds` per pass (then cancelled),
`sandbox_sync_concurrency` passes at once per process. Nothing is synced while the
sandbox is not Running (a suspended one is not woken), while `spec.suspend` is true, or
while the object is being deleted; a pass never holds the reconcile's lock, so it never
blocks a reconcile or a deletion (kopf cancels a daemon's pass at deletion).

Each pass is reported in the object's status (a merge patch of the status subresource,
conditional on the resourceVersion read): the SandboxSynced condition (True: reason
Synced, or SyncedWithProblems when files were left as they are; False: the reason of
`memplane_operator.sync.state.failure`, retried at the next interval; False SyncDisabled for an interval of
"0s"), ``status.sandbox.lastSyncTime`` (when the last pass that succeeded ended) and,
when the pass found edits made in the sandbox (`memplane_operator.sync.state.found_edits`),
``status.sandbox.lastActivityTime``. A failure repeated at each retry writes nothing new.
A new failure is a Warning Event (SyncFailed), a pass that succeeds after one a Normal
Event (Synced): `memplane_operator.events`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from memplane.client import AsyncMemplaneClient
from memplane.filesync import SyncReport, sync_once
from memplane.filesync.lock import DEFAULT_WAIT_SECONDS
from memplane.sandbox import SandboxHandle
from memplane.text.tokens import DEFAULT_ENCODING, token_counter
from memplane_operator import backends, credentials, sandbox, steps
from memplane_operator.conditions import CONFLICT, SANDBOX_READY, SANDBOX_SYNCED, Conditions
from memplane_operator.context import Ctx, Runtime, StepBlocked
from memplane_operator.kube import KubeConflictError, MemoryWorkspace
from memplane_operator.sandbox import backed
from memplane_operator.sync.state import SyncSlot, failure, found_edits, interval_seconds, summary

WRITE_ATTEMPTS = 3  # a status write refused by a concurrent one (409) is read and tried again


async def tick(runtime: Runtime, body: kopf.Body, classes: Any, logger: Any) -> float:
    """One turn of the sync loop of the MemoryWorkspace *body* (kopf's live body): a pass
    if one is due, its outcome written to the status. Returns the seconds to wait before
    the next turn (the interval; when there is nothing to sync, the shorter of the resync
    interval and the operator's default sync interval, so a sandbox made meanwhile is
    synced soon). A failed pass is the condition's, never raised; what the API server
    raises for the status read or write (`kr8s.ServerError`, `httpx.TransportError`)
    propagates (the daemon logs it and turns again after the resync interval)."""
    ctx = steps.context(runtime, body, logger)
    settings = runtime.settings
    idle = min(settings.resync_seconds, settings.sandbox_sync_seconds or settings.resync_seconds)
    recorded = ctx.recorded_sandbox()
    kind = str(recorded.get("type") or "")
    if ctx.spec.suspend or body["metadata"].get("deletionTimestamp") or ctx.conditions.is_true(CONFLICT):
        return idle  # nothing is done to a suspended, deleted or conflicting object
    class_spec = sandbox.class_spec(classes, str(recorded.get("className") or ""))
    if kind not in backends.ADAPTERS or class_spec is None or class_spec.get("type") != kind:
        await _publish(ctx, None)  # nothing to sync here (none, local, no class): no condition
        return idle
    try:
        interval = interval_seconds(ctx.spec.sync_interval, class_spec, settings.sandbox_sync_seconds)
    except ValueError as error:  # the schema's pattern makes this unreachable; reported, not raised
        await _publish(ctx, (False, "InvalidInterval", str(error)))
        return idle
    if interval is None:
        why = "syncInterval is 0s (the workspace's spec.sandbox, else its SandboxClass's, else the operator's)"
        await _publish(ctx, (False, "SyncDisabled", f"{why}: the operator does not sync this sandbox"))
        return idle
    slot = runtime.syncs.slot(ctx.uid)
    async with runtime.lock(ctx.uid):  # the sandbox step decides suspends under it
        state = slot.state or str(recorded.get("state") or "")
        handle = SandboxHandle(kind, ctx.spec.tenant_id, slot.ref or str(recorded.get("ref") or ""),
                               slot.root or str(recorded.get("root") or ""))  # fmt: skip
        if state != backed.RUNNING or not handle.ref:
            return interval  # not synced, and not woken
        slot.in_flight = True
    try:
        outcome = await _guarded(ctx, str(recorded["className"]), class_spec, handle, runtime)
    finally:
        slot.in_flight = False
    await _report(ctx, slot, handle, outcome)
    return interval


async def _guarded(
    ctx: Ctx, class_name: str, class_spec: Any, handle: SandboxHandle, runtime: Runtime
) -> SyncReport | BaseException:
    """A pass within the process's gate and the pass timeout: its report, or the error."""
    timeout = runtime.settings.sandbox_sync_timeout_seconds
    try:
        async with runtime.syncs.gate, asyncio.timeout(timeout):
            return await _pass(ctx, class_name, class_spec, handle)
    except TimeoutError:
        return TimeoutError(f"the pass did not finish within {timeout:g} s (sandbox_sync_timeout_seconds)")
    except StepBlocked as blocked:  # the class's parameters no longer parse (SandboxReady says which)
        return blocked
    except Exception as error:  # every failure is the condition's, retried at the next interval
        ctx.logger.debug("sync pass failed", exc_info=True)
        return error


class MissingKeyError(Exception):
    """The workspace's credentials Secret holds no usable key yet."""


async def _pass(ctx: Ctx, class_name: str, class_spec: Any, handle: SandboxHandle) -> SyncReport:
    api_key = await credentials.current_key(ctx)
    if api_key is None:
        raise MissingKeyError(f"Secret {ctx.spec.secret_name} holds no API key of this workspace yet")
    settings = ctx.runtime.settings
    target, targets = settings.sync_targets()
    lock_wait = min(DEFAULT_WAIT_SECONDS, settings.sandbox_sync_timeout_seconds / 2)
    count_tokens = token_counter(DEFAULT_ENCODING).count_text  # MEMORY.md's bound, as `memplane sync` counts it
    async with (
        AsyncMemplaneClient(target, api_key, timeout=settings.rpc_timeout_seconds, targets=targets) as client,
        backed.open_class(ctx, class_name, class_spec) as (_params, backend),
    ):
        return await sync_once(client, backend, handle, count_tokens=count_tokens, lock_wait_seconds=lock_wait)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def _report(ctx: Ctx, slot: SyncSlot, handle: SandboxHandle, outcome: SyncReport | BaseException) -> None:
    """Write a pass's outcome (see the module's docstring); remember its problems and edits."""
    now = _now()
    fields: dict[str, str] = {"lastSyncTime": backed.stamp(now)}
    if isinstance(outcome, BaseException):
        if isinstance(outcome, MissingKeyError):
            found = ("NoCredentials", str(outcome))
        elif isinstance(outcome, StepBlocked):
            found = ("InvalidParameters", f"the SandboxClass's parameters: {outcome} (see SandboxReady)")
        else:
            reading = failure(outcome, backends.ADAPTERS.get(handle.backend))
            found = (reading.reason, reading.message)
        new = (False, *found)
        # A warning in the log when the failure is new (and an Event: `_publish`); each retry is only debug.
        log = ctx.logger.debug if _says(ctx.conditions.get(SANDBOX_SYNCED), new) else ctx.logger.warning
        log("sandbox sync failed (%s): %s", found[0], found[1])
        await _publish(ctx, new, handle=handle)  # lastSyncTime is the last pass that succeeded
        return
    if found_edits(outcome, slot.problems):
        slot.last_edit = now
        fields["lastActivityTime"] = fields["lastSyncTime"]
    slot.problems = frozenset(outcome.problems)
    reason = "SyncedWithProblems" if outcome.problems else "Synced"
    await _publish(ctx, (True, reason, summary(outcome)), handle=handle, fields=fields)


async def _publish(
    ctx: Ctx,
    condition: tuple[bool, str, str] | None,
    *,
    handle: SandboxHandle | None = None,
    fields: dict[str, str] | None = None,
) -> None:
    """Set SandboxSynced to *condition* (status, reason, message; None: absent) and
    status.sandbox *fields* on the object as stored now, under its lock; nothing when
    neither changes. With *handle*, only while status.sandbox still records that sandbox
    (a pass on a sandbox replaced meanwhile is not reported). A write refused by a
    concurrent one (409) is read and tried again; the object gone ends it."""
    slot = ctx.runtime.syncs.slot(ctx.uid)
    kube = ctx.runtime.kube
    if not fields and _says(ctx.conditions.get(SANDBOX_SYNCED), condition):
        slot.decided, slot.condition = True, ctx.conditions.get(SANDBOX_SYNCED)
        return  # already so: no read, no write
    for _attempt in range(WRITE_ATTEMPTS):
        async with ctx.runtime.lock(ctx.uid):
            stored = await kube.read(MemoryWorkspace, ctx.name, ctx.namespace)
            if stored is None or stored["metadata"].get("uid") != ctx.uid:
                return
            status = stored.get("status") or {}
            recorded = dict(status.get("sandbox") or {})
            if handle is not None and recorded.get("ref") != handle.ref:
                return
            conditions = stored_conditions(stored, slot)
            before = conditions.get(SANDBOX_SYNCED)
            if condition is None:
                conditions.put(SANDBOX_SYNCED, None)
            else:
                conditions.set(SANDBOX_SYNCED, *condition, derive=False)
            after = conditions.get(SANDBOX_SYNCED)
            slot.decided, slot.condition = True, after
            sandbox_fields = _moved_forward(recorded, fields or {})
            if _same(before, after) and not sandbox_fields:
                return
            patch: dict[str, Any] = {
                "metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]},
                "status": {
                    "conditions": conditions.as_list(),
                    **({"sandbox": sandbox_fields} if sandbox_fields else {}),
                },
            }
            try:
                await kube.patch(MemoryWorkspace, ctx.name, ctx.namespace, patch, subresource="status")
            except KubeConflictError:
                continue
            was, now = ({SANDBOX_SYNCED: c} if c is not None else {} for c in (before, after))
            ctx.runtime.events.note(stored, was, now)  # SyncFailed when a failure is new, Synced after one
            return
    ctx.logger.debug("sync status not written: the object kept changing")


def stored_conditions(stored: Mapping[str, Any], slot: SyncSlot) -> Conditions:
    """The conditions of the object *stored* as the sync writes them back: with the
    SandboxReady this process's sandbox step last set (its patch may not be stored yet, and
    the sync must not take it back), Ready as stored — the sync never decides Ready: a Ready
    False "Suspended" (spec.suspend) or "Deleting" is a handler's, and re-deriving it from
    the parts here wrote "Reconciling" or "Provisioned" over it."""
    status = stored.get("status") or {}
    conditions = Conditions(status.get("conditions") or [], int(stored["metadata"].get("generation", 0)))
    if slot.ready is not None:
        conditions.put(SANDBOX_READY, slot.ready)
    return conditions


def _moved_forward(recorded: dict[str, Any], fields: dict[str, str]) -> dict[str, str]:
    """The *fields* that move status.sandbox forward: times only ever advance (a pass's
    lastActivityTime never takes back a later create or resume)."""
    return {key: value for key, value in fields.items() if str(recorded.get(key) or "") < value}


def _same(before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
    keys = ("status", "reason", "message", "observedGeneration")
    if before is None or after is None:
        return before is after
    return all(before.get(key) == after.get(key) for key in keys)


def _says(current: dict[str, Any] | None, condition: tuple[bool, str, str] | None) -> bool:
    """Whether the condition *current* already is *condition* (status, reason, message)."""
    if current is None or condition is None:
        return current is None and condition is None
    status, reason, message = condition
    return (current.get("status"), current.get("reason"), current.get("message")) == (str(status), reason, message)
