"""Sandboxes the operator drives through a `memplane.sandbox` backend (SandboxClass types
with an adapter in `memplane_operator.backends`: docker, pod, e2b): ensure on every
reconcile, suspend when idle, resume on activity, and release (destroy or keep) at the end.

status.sandbox records ``ref`` (the backend's reference: a container id, a Pod's name, an
E2B sandbox id), ``root`` (the sandbox root inside it), ``state`` (Pending | Running |
Suspended) and ``lastActivityTime``.

Idle suspend: the idle timeout is the workspace's ``spec.sandbox.idleTimeout``, else the
class's ``spec.idleTimeout``, else none (never suspended). Activity is the newest of the
workspace annotation ``memplane.io/sandbox-activity`` (an RFC 3339 UTC time, e.g.
``2026-12-04T22:00:00Z``, written by whatever uses the sandbox: an agent, a sidecar, a
person with ``kubectl annotate``), an edit the operator's file sync found in the sandbox
(`memplane_operator.sync.passes`; its own writes are not activity) and the operator's own
creates and resumes (recorded as ``lastActivityTime``). No idle suspend happens while a
sync pass is in the sandbox. A Running sandbox idle longer than
the timeout is suspended (the backend's `suspend`: a stopped container, a deleted Pod whose
claim stays, a paused E2B sandbox — the files kept); a Suspended one is resumed when the
annotation is newer than ``lastActivityTime``. SandboxReady stays True while suspended
(reason Suspended): it is the state asked for.

A sandbox that becomes ready by itself (a Pod: scheduled, volume bound, image pulled) is
not waited for inside a handler: it is made, recorded as Pending with SandboxReady=False
(reason PodNotReady, the message saying what the Pod reports), and looked at again after a
backoff (1 s, doubling, at most 60 s and the resync interval) until it is ready.

A Running sandbox is ensured on every pass (a container removed behind the operator's back
is made again, a stopped one started, a deleted Pod made anew, a paused E2B sandbox
resumed); a Suspended one is left alone until activity. The backend finds a workspace's
sandbox by name (docker, pod) or metadata (e2b), so a reconcile cut between the backend's
create and the status write adopts that sandbox instead of making a second one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from memplane.sandbox import SandboxHandle
from memplane_operator import backends
from memplane_operator.conditions import SANDBOX_READY
from memplane_operator.context import Ctx, StepBlocked
from memplane_operator.model import parse_duration

ACTIVITY_ANNOTATION = "memplane.io/sandbox-activity"
RUNNING, SUSPENDED, PENDING = "Running", "Suspended", "Pending"
MAX_BACKOFF_SECONDS = 60.0
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class SandboxUnavailableError(Exception):
    """The backend is out of reach: the step is retried after *delay* seconds (doubling
    per consecutive failure of the same workspace, up to MAX_BACKOFF_SECONDS)."""

    def __init__(self, message: str, delay: float) -> None:
        self.delay = delay
        super().__init__(message)


def stamp(moment: datetime) -> str:
    """*moment* as a status time: UTC, whole seconds, RFC 3339 ("2026-12-05T20:42:15Z")."""
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def _parse_time(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(UTC).replace(microsecond=0)
    except ValueError:
        return None


def idle_timeout_seconds(ctx: Ctx, class_spec: Mapping[str, Any]) -> int | None:
    """The workspace's idle timeout, else the class's (seconds); None: never suspended.
    Both are DURATION_PATTERN strings the API server checked."""
    text = ctx.spec.idle_timeout or class_spec.get("idleTimeout")
    return parse_duration(str(text)) if text else None


def activity_time(ctx: Ctx) -> datetime | None:
    """The time in the activity annotation, or None (absent or not an RFC 3339 time: logged)."""
    text = ctx.annotations.get(ACTIVITY_ANNOTATION)
    moment = _parse_time(text)
    if text and moment is None:
        ctx.logger.warning("annotation %s=%r is not an RFC 3339 time; ignored", ACTIVITY_ANNOTATION, text)
    return moment


def _handle(kind: str, tenant: str, recorded: Mapping[str, Any], fallback_ref: str | None) -> SandboxHandle:
    return SandboxHandle(kind, tenant, str(recorded.get("ref") or fallback_ref or ""), str(recorded.get("root") or ""))


def _blocked(ctx: Ctx, reason: str, message: str) -> StepBlocked:
    ctx.conditions.set(SANDBOX_READY, False, reason, message)
    return StepBlocked(message)


def retried(ctx: Ctx, class_name: str, reason: str, message: str) -> SandboxUnavailableError:
    """SandboxReady=False *reason*, retried after a backoff doubling per consecutive
    retry of the workspace (1 s, 2 s, ... up to MAX_BACKOFF_SECONDS and the resync)."""
    failures = ctx.runtime.sandbox_failures.get(ctx.uid, 0)
    ctx.runtime.sandbox_failures[ctx.uid] = failures + 1
    delay = min(2.0**failures, MAX_BACKOFF_SECONDS, ctx.runtime.settings.resync_seconds)
    text = f"SandboxClass {class_name!r}: {message}; retrying in {delay:g} s"
    ctx.conditions.set(SANDBOX_READY, False, reason, text)
    return SandboxUnavailableError(text, delay)


def _unavailable(ctx: Ctx, class_name: str, error: Exception) -> SandboxUnavailableError:
    return retried(ctx, class_name, "BackendUnavailable", str(error))


def target_of(ctx: Ctx) -> backends.Target:
    """The workspace a backend is opened for (see `backends.Target`)."""
    settings = ctx.runtime.settings
    return backends.Target(
        namespace=ctx.namespace,
        owner=ctx.owner_reference(),
        storage=ctx.spec.storage_size,
        kube=ctx.runtime.kube,
        own_namespace=settings.class_secret_namespace(),
    )


@contextlib.asynccontextmanager
async def open_class(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> AsyncIterator[tuple[Any, Any]]:
    """(parameters, backend) of SandboxClass *class_name* for this workspace. Raises
    `StepBlocked` (SandboxReady=False, InvalidParameters naming the field)."""
    kind = str(spec["type"])
    async with contextlib.AsyncExitStack() as stack:
        try:
            params = backends.parse(kind, class_name, spec)
            using = ctx.runtime.sandboxes.use(class_name, kind, params, target_of(ctx))
            backend = await stack.enter_async_context(using)
        except backends.InvalidParametersError as error:
            raise _blocked(ctx, "InvalidParameters", f"SandboxClass {class_name!r}: {error}") from error
        yield params, backend


async def ensure_backed(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> None:
    """The workspace's sandbox of class *class_name* is Running, or Suspended when idle
    past its timeout (Pending while a sandbox that readies by itself, a Pod, is not yet).
    Sets SandboxReady and status.sandbox. Raises `StepBlocked` (InvalidParameters,
    BackendRefused) or `SandboxUnavailableError` (BackendUnavailable, or a wait such as
    PodNotReady: retried with backoff)."""
    async with open_class(ctx, class_name, spec) as (params, backend):
        await _ensure(ctx, class_name, spec, params, backend)


async def _ensure(ctx: Ctx, class_name: str, spec: Mapping[str, Any], params: Any, backend: Any) -> None:
    kind = str(spec["type"])
    adapter = backends.ADAPTERS[kind]
    tenant = ctx.spec.tenant_id
    recorded = ctx.recorded_sandbox()
    if recorded.get("className") != class_name or not recorded.get("ref"):
        recorded = {}  # nothing of this class recorded yet: ensure (adopting one made before a crash)
    now = datetime.now(UTC).replace(microsecond=0)
    last = _parse_time(recorded.get("lastActivityTime"))
    slot = ctx.runtime.syncs.slot(ctx.uid)
    seen = max((t for t in (activity_time(ctx), slot.last_edit) if t is not None), default=None)
    newer = seen is not None and (last is None or seen > last)
    timeout = idle_timeout_seconds(ctx, spec)
    state = recorded.get("state")
    idle_since = last if timeout is not None and last is not None and not newer else None
    calls = ctx.runtime.sandboxes
    waiting = backends.Started(SandboxHandle(kind, tenant, "", ""))
    try:
        if state == SUSPENDED and not newer:
            pass  # stays suspended until activity
        elif (
            state == RUNNING
            and idle_since is not None
            and (now - idle_since).total_seconds() >= (timeout or 0)
            and not slot.in_flight  # a sync pass is in the sandbox: suspended at a later pass
        ):
            handle = _handle(kind, tenant, recorded, None)
            await calls.call(kind, f"suspend {handle.ref}", backend.suspend(handle))
            state = SUSPENDED
            ctx.logger.info("suspended sandbox %s (idle since %s)", handle.ref, stamp(idle_since))
        else:
            waiting = await calls.call(kind, f"ensure the sandbox of {tenant}", adapter.start(backend, tenant))
            handle = waiting.handle
            if waiting.waiting:
                state = PENDING
            elif state != RUNNING or handle.ref != recorded.get("ref"):
                how = {SUSPENDED: "resumed", PENDING: "ready"}.get(str(state), "ensured")
                ctx.logger.info("sandbox %s running (%s)", handle.ref, how)
                last = now  # a create or a resume counts as activity
                state = RUNNING
            elif newer:
                last = seen
            recorded.update(ref=handle.ref, root=handle.root)
    except backends.BackendUnavailableError as error:
        raise _unavailable(ctx, class_name, error) from error
    except backends.BackendRefusedError as error:
        raise _blocked(ctx, "BackendRefused", f"SandboxClass {class_name!r}: {error}") from error
    ctx.status["sandbox"] = {
        "className": class_name,
        "type": kind,
        "ref": recorded["ref"],
        "root": recorded["root"],
        "state": state,
        "lastActivityTime": stamp(last or now),
        "claimName": None,
    }
    slot.state, slot.ref, slot.root = str(state), str(recorded["ref"]), str(recorded["root"])
    if state == PENDING:
        raise retried(ctx, class_name, waiting.reason, waiting.waiting)
    ctx.runtime.sandbox_failures.pop(ctx.uid, None)
    _report(ctx, f"{kind} sandbox {str(recorded['ref'])[:12]}", state, timeout, recorded["root"])


def _report(ctx: Ctx, where: str, state: str, timeout: int | None, root: str) -> None:
    """SandboxReady=True for a Running or Suspended sandbox."""
    if state == SUSPENDED:
        why = f"idle past {timeout} s" if timeout is not None else "idle"
        message = f"{where} suspended ({why}); annotate {ACTIVITY_ANNOTATION} with the time of use to resume it"
        ctx.conditions.set(SANDBOX_READY, True, "Suspended", message)
    else:
        ctx.conditions.set(SANDBOX_READY, True, "Provisioned", f"{where} running, root {root}")


async def release_backed(
    ctx: Ctx, recorded: Mapping[str, Any], classes_spec: Mapping[str, Any] | None, *, destroy: bool
) -> str:
    """Destroy (*destroy*) or suspend the recorded sandbox of class ``recorded.className``
    (its spec *classes_spec*; None when that class is gone: nothing can reach the sandbox,
    it is left and the returned text says so). Without a recorded ref the sandbox is looked
    for by name (a create cut short before the status write). Raises
    `SandboxUnavailableError` while the backend is out of reach and a sandbox is recorded
    (with none recorded, it is most likely one never made: left, with a warning),
    `StepBlocked` for parameters that no longer parse or a refusal. Returns what was done
    (for logs)."""
    class_name = str(recorded.get("className") or "")
    kind = str(recorded.get("type") or "")
    if classes_spec is None or classes_spec.get("type") != kind:
        ctx.logger.warning("SandboxClass %r is gone: sandbox %s left as it is", class_name, recorded.get("ref"))
        return f"left (SandboxClass {class_name!r} is gone)"
    async with open_class(ctx, class_name, classes_spec) as (params, backend):
        return await _release(ctx, recorded, params, backend, destroy=destroy)


async def _release(ctx: Ctx, recorded: Mapping[str, Any], params: Any, backend: Any, *, destroy: bool) -> str:
    class_name, kind = str(recorded.get("className")), str(recorded.get("type"))
    tenant = ctx.spec.tenant_id
    calls = ctx.runtime.sandboxes
    try:
        ref = recorded.get("ref") or await calls.call(
            kind, f"find the sandbox of {tenant}", backends.ADAPTERS[kind].ref_by_name(backend, params, tenant)
        )
        if not ref:
            return f"no {kind} sandbox found"
        handle = _handle(kind, tenant, recorded, str(ref))
        operation = backend.destroy(handle) if destroy else backend.suspend(handle)
        await calls.call(kind, f"{'destroy' if destroy else 'suspend'} {handle.ref}", operation)
    except backends.BackendUnavailableError as error:
        if not recorded.get("ref"):  # never recorded: most likely never made (the backend was down all along)
            ctx.logger.warning("no sandbox recorded and %s; a sandbox of %s, if any, is left", error, tenant)
            return f"left (no sandbox recorded; the backend is unavailable: {error})"
        raise _unavailable(ctx, class_name, error) from error
    except backends.BackendRefusedError as error:
        raise _blocked(ctx, "BackendRefused", f"SandboxClass {class_name!r}: {error}") from error
    return f"{'destroyed' if destroy else 'kept (suspended)'} {kind} sandbox {handle.ref}"
