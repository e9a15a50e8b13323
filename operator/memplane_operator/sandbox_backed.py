"""Sandboxes the operator drives through a `memplane.sandbox` backend (SandboxClass types
with an adapter in `memplane_operator.backends`: docker today): ensure on every reconcile,
suspend when idle, resume on activity, and release (destroy or keep) at the end.

status.sandbox records ``ref`` (the backend's reference: a container id), ``root`` (the
sandbox root inside it), ``state`` (Running | Suspended) and ``lastActivityTime``.

Idle suspend: the idle timeout is the workspace's ``spec.sandbox.idleTimeout``, else the
class's ``spec.idleTimeout``, else none (never suspended). Activity is the newest of the
workspace annotation ``memplane.io/sandbox-activity`` (an RFC 3339 UTC time, e.g.
``2026-12-04T22:00:00Z``, written by whatever uses the sandbox: an agent, a sidecar, a
person with ``kubectl annotate``; nothing in memplane writes it yet) and the operator's own
creates and resumes (recorded as ``lastActivityTime``). A Running sandbox idle longer than
the timeout is suspended (the backend's `suspend`: a stopped container keeps its files); a
Suspended one is resumed (`ensure`) when the annotation is newer than ``lastActivityTime``.
SandboxReady stays True while suspended (reason Suspended): it is the state asked for.

A Running sandbox is ensured on every pass (a container removed behind the operator's back
is made again, a stopped one started); a Suspended one is left alone until activity.
`ensure` finds the backend's sandbox by name, so a reconcile cut between the backend's
create and the status write adopts that sandbox instead of making a second one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memplane.sandbox import SandboxHandle
from memplane_operator import backends
from memplane_operator.conditions import SANDBOX_READY
from memplane_operator.context import Ctx, StepBlocked
from memplane_operator.model import parse_duration

ACTIVITY_ANNOTATION = "memplane.io/sandbox-activity"
RUNNING, SUSPENDED = "Running", "Suspended"
MAX_BACKOFF_SECONDS = 60.0
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class SandboxUnavailableError(Exception):
    """The backend is out of reach: the step is retried after *delay* seconds (doubling
    per consecutive failure of the same workspace, up to MAX_BACKOFF_SECONDS)."""

    def __init__(self, message: str, delay: float) -> None:
        self.delay = delay
        super().__init__(message)


def _stamp(moment: datetime) -> str:
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


def _handle(kind: str, tenant: str, recorded: Mapping[str, Any], fallback_ref: str) -> SandboxHandle:
    return SandboxHandle(kind, tenant, str(recorded.get("ref") or fallback_ref), str(recorded.get("root") or ""))


def _blocked(ctx: Ctx, reason: str, message: str) -> StepBlocked:
    ctx.conditions.set(SANDBOX_READY, False, reason, message)
    return StepBlocked(message)


def _unavailable(ctx: Ctx, class_name: str, error: Exception) -> SandboxUnavailableError:
    failures = ctx.runtime.sandbox_failures.get(ctx.uid, 0)
    ctx.runtime.sandbox_failures[ctx.uid] = failures + 1
    delay = min(2.0**failures, MAX_BACKOFF_SECONDS, ctx.runtime.settings.resync_seconds)
    message = f"SandboxClass {class_name!r}: {error}; retrying in {delay:g} s"
    ctx.conditions.set(SANDBOX_READY, False, "BackendUnavailable", message)
    return SandboxUnavailableError(message, delay)


async def open_class(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """(parameters, backend) of SandboxClass *class_name*. Raises `StepBlocked`
    (SandboxReady=False, InvalidParameters naming the field)."""
    kind = str(spec["type"])
    try:
        params = backends.parse(kind, class_name, spec)
    except backends.InvalidParametersError as error:
        raise _blocked(ctx, "InvalidParameters", f"SandboxClass {class_name!r}: {error}") from error
    return params, await ctx.runtime.sandboxes.get(class_name, kind, params)


async def ensure_backed(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> None:
    """The workspace's sandbox of class *class_name* is Running, or Suspended when idle
    past its timeout. Sets SandboxReady and status.sandbox. Raises `StepBlocked`
    (InvalidParameters, BackendRefused) or `SandboxUnavailableError` (BackendUnavailable)."""
    kind = str(spec["type"])
    params, backend = await open_class(ctx, class_name, spec)
    adapter = backends.ADAPTERS[kind]
    tenant = ctx.spec.tenant_id
    recorded = dict(ctx.observed.get("sandbox") or {})
    if recorded.get("className") != class_name or not recorded.get("ref"):
        recorded = {}  # nothing of this class recorded yet: ensure (adopting one made before a crash)
    now = datetime.now(UTC).replace(microsecond=0)
    last = _parse_time(recorded.get("lastActivityTime"))
    seen = activity_time(ctx)
    newer = seen is not None and (last is None or seen > last)
    timeout = idle_timeout_seconds(ctx, spec)
    state = recorded.get("state")
    idle_since = last if timeout is not None and last is not None and not newer else None
    calls = ctx.runtime.sandboxes
    try:
        if state == SUSPENDED and not newer:
            pass  # stays suspended until activity
        elif state == RUNNING and idle_since is not None and (now - idle_since).total_seconds() >= (timeout or 0):
            handle = _handle(kind, tenant, recorded, adapter.ref_by_name(params, tenant))
            await calls.call(kind, f"suspend {handle.ref}", backend.suspend(handle))
            state = SUSPENDED
            ctx.logger.info("suspended sandbox %s (idle since %s)", handle.ref, _stamp(idle_since))
        else:
            handle = await calls.call(kind, f"ensure the sandbox of {tenant}", backend.ensure(tenant))
            if state != RUNNING or handle.ref != recorded.get("ref"):
                ctx.logger.info("sandbox %s running (%s)", handle.ref, "resumed" if state else "ensured")
                last = now  # a create or a resume counts as activity
            elif newer:
                last = seen
            recorded.update(ref=handle.ref, root=handle.root)
            state = RUNNING
    except backends.BackendUnavailableError as error:
        raise _unavailable(ctx, class_name, error) from error
    except backends.BackendRefusedError as error:
        raise _blocked(ctx, "BackendRefused", f"SandboxClass {class_name!r}: {error}") from error
    ctx.runtime.sandbox_failures.pop(ctx.uid, None)
    ctx.status["sandbox"] = {
        "className": class_name,
        "type": kind,
        "ref": recorded["ref"],
        "root": recorded["root"],
        "state": state,
        "lastActivityTime": _stamp(last or now),
        "claimName": None,
    }
    where = f"{kind} sandbox {str(recorded['ref'])[:12]}"
    if state == SUSPENDED:
        why = f"idle past {timeout} s" if timeout is not None else "idle"
        message = f"{where} suspended ({why}); annotate {ACTIVITY_ANNOTATION} with the time of use to resume it"
        ctx.conditions.set(SANDBOX_READY, True, "Suspended", message)
    else:
        ctx.conditions.set(SANDBOX_READY, True, "Provisioned", f"{where} running, root {recorded['root']}")


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
    params, backend = await open_class(ctx, class_name, classes_spec)
    tenant = ctx.spec.tenant_id
    handle = _handle(kind, tenant, recorded, backends.ADAPTERS[kind].ref_by_name(params, tenant))
    operation = backend.destroy(handle) if destroy else backend.suspend(handle)
    try:
        await ctx.runtime.sandboxes.call(kind, f"{'destroy' if destroy else 'suspend'} {handle.ref}", operation)
    except backends.BackendUnavailableError as error:
        if not recorded.get("ref"):  # never recorded: most likely never made (the backend was down all along)
            ctx.logger.warning("no sandbox recorded and %s; a sandbox %s, if any, is left", error, handle.ref)
            return f"left (no sandbox recorded; the backend is unavailable: {error})"
        raise _unavailable(ctx, class_name, error) from error
    except backends.BackendRefusedError as error:
        raise _blocked(ctx, "BackendRefused", f"SandboxClass {class_name!r}: {error}") from error
    return f"{'destroyed' if destroy else 'kept (suspended)'} {kind} sandbox {handle.ref}"
