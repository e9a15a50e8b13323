"""kopf handlers of MemoryWorkspace and SandboxClass, registered by `register()`.

- create / update / resume: the reconcile, as kopf sub-handlers run one per cycle in this
  order — workspace -> credentials -> policy (quotas, retention) -> sandbox -> status.
  kopf records each finished step in the status, in the same write as the conditions the
  step set (`memplane_operator.persistence`), so an operator killed mid-reconcile resumes
  at the step it was in, and every step is itself idempotent (it looks before it acts) for
  the step that was cut short. A changed spec (a new generation) starts the steps afresh at
  once, even while one waits for its retry. A step that finds a state only a person can
  fix ends the reconcile (the conditions say why): an edit of the spec starts another at
  once, and the resync looks again for a change elsewhere (a SandboxClass made).
- every status write posts an Event per transition of Ready (and QuotaExceeded), typed
  Normal or Warning (`memplane_operator.events`).
- a timer every `resync_seconds`: the same steps in one pass, repairing drift (a deleted
  Secret, quotas changed behind the operator's back), reporting usage and revoking
  rotated keys after their grace period.
- a daemon per object: the file sync of its running sandbox (`memplane_operator.sync`), a pass every
  syncInterval, outside the reconcile's lock; stopped (a pass in flight cancelled after
  SYNC_CANCEL_SECONDS) when the object is deleted or the operator exits.
- delete (finalizer memplane.io/workspace-protection): reclaimPolicy, idempotent, "already
  gone" is success; nothing is done to a workspace this object does not own.
- indexes: every MemoryWorkspace's tenantId (duplicates across namespaces are Conflict) and
  every SandboxClass (read without API calls).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import kopf
import kr8s

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from memplane_operator import credentials, events, persistence, sandbox, steps, workspace
from memplane_operator.backends import Backends
from memplane_operator.conditions import READY
from memplane_operator.context import Ctx, Runtime, StepBlocked
from memplane_operator.crds import GROUP, VERSION
from memplane_operator.kube import Kube
from memplane_operator.sandbox.backed import SandboxUnavailableError
from memplane_operator.settings import OperatorSettings
from memplane_operator.sync import passes
from memplane_operator.sync.state import SyncBook

WORKSPACES = (GROUP, VERSION, "memoryworkspaces")
CLASSES = (GROUP, VERSION, "sandboxclasses")
RECONCILE = "reconcile"  # the handler id of create / update / resume (its records are per generation)
SYNC_CANCEL_SECONDS = 1.0  # a sync pass in flight at deletion or exit is cancelled after this


def _runtime(memo: Any) -> Runtime:
    runtime: Runtime = memo.runtime
    return runtime


def tenants(**kwargs: Any) -> dict[str, Any]:
    """Index: tenantId -> (namespace, name, uid, creationTimestamp) of each MemoryWorkspace."""
    meta = kwargs["meta"]
    claim = (kwargs["namespace"], kwargs["name"], kwargs["uid"], str(meta.get("creationTimestamp", "")))
    return {str(kwargs["spec"].get("tenantId", "")): claim}


def sandbox_classes(**kwargs: Any) -> dict[str, Any]:
    """Index: name -> (spec, annotations) of each SandboxClass."""
    return {kwargs["name"]: (dict(kwargs["spec"]), dict(kwargs["meta"].get("annotations") or {}))}


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Kubernetes credentials: the in-cluster ServiceAccount, else $KUBECONFIG (kopf's own
    readers; kr8s finds the same ones on its side)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


async def cleanup(**kwargs: Any) -> None:
    """Close the AdminService channel and the sandbox backends' clients at exit."""
    memo = kwargs["memo"]
    if hasattr(memo, "runtime"):
        await _runtime(memo).admin.close()
        await _runtime(memo).sandboxes.close()


async def probe_admin(**kwargs: Any) -> str:
    """Liveness probe detail: where the AdminService is."""
    return _runtime(kwargs["memo"]).settings.admin_target


async def reconcile(**kwargs: Any) -> None:
    """create / update / resume: check the spec and the tenantId claim, then the steps as
    kopf sub-handlers, one per cycle, each recorded when done. A failing step is retried
    after its own delay, and no later step runs before it."""
    patch: kopf.Patch = kwargs["patch"]
    runtime = _runtime(kwargs["memo"])
    # The context is made under the lock: a resync pass that held it (it read the older spec)
    # may have decided the sandbox meanwhile, and kopf's body does not show that pass's write
    # yet; steps.context reads it from the runtime's record (memplane_operator.sync.state).
    async with runtime.lock(kwargs["body"]["metadata"]["uid"]):
        ctx = steps.context(runtime, kwargs["body"], kwargs["logger"])
        try:
            await _reconcile(ctx, kwargs)
        finally:
            _write_status(ctx, kwargs["body"], patch)


def _write_status(ctx: Ctx, body: kopf.Body, patch: kopf.Patch) -> None:
    """The status of *ctx* into kopf's *patch*, and an Event for each transition it makes."""
    status = ctx.status_patch()
    patch.status.update(status)
    ctx.runtime.wrote(ctx.uid, status)
    ctx.runtime.events.note(body, events.by_type(ctx.observed.get("conditions")), events.by_type(status["conditions"]))


async def _reconcile(ctx: Ctx, kwargs: Mapping[str, Any]) -> None:
    if kwargs.get("reason") == "resume" and _settled(ctx) and not ctx.spec.suspend:
        return  # reconciled for this generation before the restart: the resync checks drift
    if ctx.spec.suspend:
        _suspended(ctx)
        return
    try:
        steps.check_spec(ctx)
        workspace.check_claims(ctx, kwargs["tenants"].get(ctx.spec.tenant_id, ()))
    except StepBlocked:
        return  # recorded in the conditions; an edit (update) or the resync looks again
    classes = kwargs["sandbox_classes"]
    fns = {name: functools.partial(steps.run_step, ctx, name, classes) for name in steps.STEPS}
    order = InOrder()
    try:
        # kopf takes a mapping of sub-handler ids to functions (typed as an iterable).
        await kopf.execute(fns=_kopf_fns(fns), lifecycle=order)  # type: ignore[arg-type]
    except kopf.TemporaryError as pending:
        if ctx.blocked:
            return  # only a person can help (the conditions say why): an edit starts afresh, the resync looks
        delay = ctx.retry_after if ctx.retry_after is not None else order.sleeping_seconds
        if delay is None:
            raise  # the next step is due now
        raise kopf.TemporaryError(f"a step waits {delay:.0f} s for its retry", delay=delay) from pending


def _suspended(ctx: Ctx) -> None:
    ctx.conditions.set(READY, False, "Suspended", "spec.suspend is true: changes are not applied")


def _settled(ctx: Ctx) -> bool:
    return bool(
        ctx.conditions.is_true(READY, current=True) and ctx.observed.get("observedGeneration") == ctx.generation
    )


async def resync(**kwargs: Any) -> None:
    """Timer: every step in one pass (drift repaired, usage reported), then the revocation
    of a rotated key whose grace period is over."""
    patch: kopf.Patch = kwargs["patch"]
    logger = kwargs["logger"]
    runtime = _runtime(kwargs["memo"])
    body = kwargs["body"]  # kopf keeps a timer's body live: read under the lock, it is the newest seen
    async with runtime.lock(body["metadata"]["uid"]):
        ctx = steps.context(runtime, body, logger)
        if body["metadata"].get("deletionTimestamp"):
            return
        if ctx.spec.suspend:  # level-triggered: repairs a status a concurrent pass wrote before the edit
            _suspended(ctx)
            _write_status(ctx, body, patch)
            return
        try:
            steps.check_spec(ctx)
            workspace.check_claims(ctx, kwargs["tenants"].get(ctx.spec.tenant_id, ()))
            for name in steps.STEPS:
                await steps.run_step(ctx, name, kwargs["sandbox_classes"])
            await credentials.revoke_expired_previous_key(ctx)
        except kopf.TemporaryError as error:
            logger.debug("resync stopped: %s", error)
        except StepBlocked:
            pass
        finally:
            _write_status(ctx, body, patch)


async def sync_daemon(**kwargs: Any) -> None:
    """Daemon: the object's file sync loop (`passes.tick`), until kopf stops it. A turn
    that fails outside a pass (the API server unreachable for its status write) is logged
    and the loop goes on after the resync interval."""
    stopped: kopf.DaemonStopped = kwargs["stopped"]
    runtime = _runtime(kwargs["memo"])
    logger = kwargs["logger"]
    while not stopped:
        try:
            delay = await passes.tick(runtime, kwargs["body"], kwargs["sandbox_classes"], logger)
        except Exception as error:  # the loop outlives a failed turn; the next one tries again
            logger.warning("sandbox sync: %s: %s", type(error).__name__, error)
            delay = runtime.settings.resync_seconds
        await stopped.wait(delay)


async def delete(**kwargs: Any) -> None:
    """Finalizer: honour reclaimPolicy for a workspace this object owns; revoke its keys,
    delete its Secret and, by reclaimPolicy, its sandbox (Delete: the claim deleted, a
    backend's sandbox destroyed; Retain: kept, a backend's suspended) — those are the
    object's own, so they go even when the workspace is already gone. Idempotent; while the
    services or the sandbox backend are unreachable the finalizer stays and the phase reads
    Deleting. Class parameters that no longer parse, or a backend refusing, leave the
    sandbox as it is (a warning Event says so) rather than hold the object forever."""
    logger = kwargs["logger"]
    patch: kopf.Patch = kwargs["patch"]
    runtime = _runtime(kwargs["memo"])
    async with runtime.lock(kwargs["body"]["metadata"]["uid"]):  # the context too, as in reconcile
        ctx = steps.context(runtime, kwargs["body"], logger)
        ctx.deleting = True
        try:
            outcome = await workspace.reclaim_workspace(ctx)
            revoked = await credentials.release_credentials(ctx)
            try:
                released = await sandbox.release_sandbox(ctx, kwargs["sandbox_classes"])
            except StepBlocked as blocked:
                logger.warning("sandbox left as it is: %s", blocked)
                released = f"left ({blocked})"
        except UnavailableError as error:  # the finalizer stays until the services answer
            why = f"waiting for the AdminService to release the workspace: {error}"
            ctx.conditions.set(READY, False, "Deleting", why)
            _write_status(ctx, kwargs["body"], patch)
            raise kopf.TemporaryError(f"AdminService unavailable: {error}", delay=5) from error
        except SandboxUnavailableError as error:  # ... and until the sandbox backend answers
            ctx.conditions.set(READY, False, "Deleting", f"waiting for the sandbox backend: {error}")
            _write_status(ctx, kwargs["body"], patch)
            raise kopf.TemporaryError(str(error), delay=error.delay) from error
    logger.info(
        "released (%s): %s; %d key(s) revoked; sandbox: %s",
        ctx.spec.reclaim_policy,
        outcome,
        revoked,
        released,
    )
    runtime.locks.pop(ctx.uid, None)
    runtime.statuses.pop(ctx.uid, None)
    runtime.syncs.forget(ctx.uid)
    runtime.events.forget(ctx.uid)


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register every handler on *registry*; *settings* give the resync interval and, at
    startup, the AdminService client."""

    async def startup(**kwargs: Any) -> None:
        persistence.configure(kwargs["settings"], generational=[RECONCILE])
        admin = AsyncMemplaneClient(
            settings.admin_target, settings.read_admin_key(), timeout=settings.rpc_timeout_seconds
        )
        kwargs["memo"].runtime = Runtime(
            settings=settings,
            admin=admin,
            kube=Kube(await kr8s.asyncio.api()),
            sandboxes=Backends(call_timeout_seconds=settings.sandbox_call_timeout_seconds),
            syncs=SyncBook(concurrency=settings.sandbox_sync_concurrency),
        )
        kwargs["logger"].info("memplane operator: AdminService at %s", settings.admin_target)

    kopf.on.startup(id="startup", registry=registry)(startup)
    kopf.on.login(id="login", registry=registry)(login)
    kopf.on.cleanup(id="cleanup", registry=registry)(cleanup)
    kopf.on.probe(id="admin", registry=registry)(probe_admin)
    kopf.index(*WORKSPACES, id="tenants", registry=registry)(tenants)
    kopf.index(*CLASSES, id="sandbox_classes", registry=registry)(sandbox_classes)
    # backoff: an error no step turned into a retry (an API-server connection dropped mid-call,
    # httpx.ReadError) is retried after UNAVAILABLE_RETRY_SECONDS, not kopf's default 60 s
    # (which once held a workspace's deletion past a minute in CI).
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(*WORKSPACES, id=RECONCILE, backoff=steps.UNAVAILABLE_RETRY_SECONDS, registry=registry)(reconcile)
    interval = settings.resync_seconds
    # backoff: a failed pass (a transient API-server error) is retried after one interval,
    # not kopf's default 60 s (which once held a due key revocation a minute in CI).
    kopf.timer(
        *WORKSPACES, id="resync", interval=interval, initial_delay=interval, backoff=interval, registry=registry
    )(resync)
    kopf.daemon(*WORKSPACES, id="sandbox-sync", cancellation_timeout=SYNC_CANCEL_SECONDS, registry=registry)(
        sync_daemon
    )
    kopf.on.delete(*WORKSPACES, id="release", backoff=steps.UNAVAILABLE_RETRY_SECONDS, registry=registry)(delete)


class InOrder:
    """The kopf lifecycle of the steps: the first unfinished step, in STEPS order, and only
    when it is due — a step waiting for its retry holds the later ones back (kopf's own
    lifecycles run the next awakened handler instead, which would reach the credentials
    step while the workspace step is still failing). `sleeping_seconds` is how long the
    held-back step still waits (None when one ran)."""

    def __init__(self) -> None:
        self.sleeping_seconds: float | None = None

    def __call__(self, handlers: Sequence[Any], *, state: Mapping[str, Any], **_: Any) -> list[Any]:
        for step in steps.STEPS:
            recorded = [key for key in state if key.endswith(f"/{step}")]
            if recorded and state[recorded[0]].finished:
                continue
            due = [h for h in handlers if h.id.endswith(f"/{step}")][:1]
            if not due and recorded and state[recorded[0]].delayed is not None:
                held = state[recorded[0]]
                now = held.basetime + timedelta(seconds=asyncio.get_running_loop().time())
                self.sleeping_seconds = max(0.0, (held.delayed - now).total_seconds())
            return due
        return []


def _kopf_fns(fns: Mapping[str, Callable[[], Awaitable[None]]]) -> dict[str, Callable[..., Awaitable[None]]]:
    """kopf calls sub-handlers with its keyword arguments; ours take none."""

    def adapt(fn: Callable[[], Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        async def handler(**_: Any) -> None:
            await fn()

        return handler

    return {name: adapt(fn) for name, fn in fns.items()}
