"""The reconcile steps of a MemoryWorkspace, in order, and how their failures read to kopf.

workspace -> credentials -> policy (quotas, retention) -> sandbox -> status. Each step looks
before it acts, so running it again after it completed changes nothing; a step that needs
the workspace checks that it exists and belongs to this object first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from memplane.errors import (
    InvalidArgumentError,
    MemplaneError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
)
from memplane_operator import credentials, sandbox, workspace
from memplane_operator.conditions import CONFLICT, DATABASE_READY, SANDBOX_READY, Conditions
from memplane_operator.context import Ctx, Runtime, StepBlocked
from memplane_operator.kube import KubeConflictError
from memplane_operator.model import WorkspaceSpec
from memplane_operator.sandbox.backed import SandboxUnavailableError

STEPS = ("workspace", "credentials", "policy", "sandbox", "status")

Step = Callable[[Ctx, Mapping[str, Any]], Awaitable[None]]


async def _workspace_step(ctx: Ctx, classes: Mapping[str, Any]) -> None:
    await workspace.ensure_workspace(ctx)


async def _require_owned(ctx: Ctx) -> None:
    if ctx.conditions.is_true(CONFLICT) or await workspace.owned_workspace(ctx) is None:
        raise StepBlocked("the workspace is not provisioned for this MemoryWorkspace")


async def _credentials_step(ctx: Ctx, classes: Mapping[str, Any]) -> None:
    await _require_owned(ctx)
    await credentials.ensure_credentials(ctx)


async def _policy_step(ctx: Ctx, classes: Mapping[str, Any]) -> None:
    await _require_owned(ctx)
    await workspace.ensure_policy(ctx)


async def _sandbox_step(ctx: Ctx, classes: Mapping[str, Any]) -> None:
    if ctx.conditions.is_true(CONFLICT):
        raise StepBlocked("conflict")
    try:
        await sandbox.ensure_sandbox(ctx, classes)
    finally:  # what later passes of this process read instead of an older body (memplane_operator.sync.state)
        ctx.runtime.syncs.record(ctx.uid, ctx.status.get("sandbox"), ctx.conditions.get(SANDBOX_READY))


async def _status_step(ctx: Ctx, classes: Mapping[str, Any]) -> None:
    await _require_owned(ctx)
    await workspace.report_usage(ctx)


STEP_FUNCTIONS: dict[str, Step] = {
    "workspace": _workspace_step,
    "credentials": _credentials_step,
    "policy": _policy_step,
    "sandbox": _sandbox_step,
    "status": _status_step,
}


def context(runtime: Runtime, body: kopf.Body, logger: Any) -> Ctx:
    """The Ctx of one reconcile of *body*; its status is the one this process's last pass
    wrote (`Runtime.status`), its conditions carry the SandboxSynced the file sync last
    wrote and the SandboxReady the sandbox step last set, Ready derived again (see
    `memplane_operator.sync.state`: *body* may predate a pass of this process). Make it
    under the object's lock, so no sandbox step runs between it and its status write."""
    meta = body["metadata"]
    status = runtime.status(meta["uid"], body.get("status") or {})  # the last pass's write, seen or not
    ctx = Ctx(
        runtime=runtime,
        name=meta["name"],
        namespace=meta["namespace"],
        uid=meta["uid"],
        generation=int(meta.get("generation", 0)),
        annotations=dict(meta.get("annotations") or {}),
        spec=WorkspaceSpec.parse(meta["name"], body["spec"]),
        conditions=Conditions(status.get("conditions") or [], int(meta.get("generation", 0))),
        logger=logger,
        observed=status,
    )
    runtime.syncs.overlay(ctx.uid, ctx.conditions)
    return ctx


async def run_step(ctx: Ctx, name: str, classes: Mapping[str, Any]) -> None:
    """One step, its failures turned into conditions and kopf's retry language: a state
    only a person can fix is `Ctx.blocked` (the reconcile ends there: an edit of the spec
    starts another at once, the resync looks again for a change elsewhere); an unreachable
    service or a conflict on a Secret is retried soon."""
    retry = ctx.runtime.settings.resync_seconds
    try:
        await STEP_FUNCTIONS[name](ctx, classes)
    except StepBlocked as blocked:
        ctx.blocked = True
        raise _retry(ctx, f"{name}: {blocked}", retry) from blocked
    except SandboxUnavailableError as error:  # SandboxReady=False, BackendUnavailable: retried with backoff
        raise _retry(ctx, f"{name}: {error}", error.delay) from error
    except (UnauthenticatedError, PermissionDeniedError) as error:
        ctx.conditions.set(
            DATABASE_READY, False, "AdminKeyRejected", f"the AdminService refused the admin key: {error}"
        )
        raise _retry(ctx, f"{name}: admin key rejected", retry) from error
    except UnavailableError as error:
        ctx.conditions.set(DATABASE_READY, False, "ServiceUnavailable", f"AdminService unreachable: {error}")
        raise _retry(ctx, f"{name}: AdminService unavailable", min(retry, UNAVAILABLE_RETRY_SECONDS)) from error
    except KubeConflictError as error:
        raise _retry(ctx, f"{name}: changed concurrently; retrying", 1.0) from error
    except InvalidArgumentError as error:  # the services refuse the spec: only an edit helps
        ctx.conditions.set(DATABASE_READY, False, "RejectedByServices", f"the services refuse the spec: {error}")
        ctx.blocked = True
        raise _retry(ctx, f"{name}: {error}", retry) from error
    except MemplaneError as error:
        ctx.conditions.set(DATABASE_READY, False, "ServiceError", f"{type(error).__name__}: {error}")
        raise _retry(ctx, f"{name}: {error}", retry) from error


UNAVAILABLE_RETRY_SECONDS = 5.0


def _retry(ctx: Ctx, message: str, delay: float) -> kopf.TemporaryError:
    """kopf's retry of a failed step after *delay* seconds (recorded for the parent handler,
    which waits that long before the next step cycle)."""
    ctx.retry_after = delay if ctx.retry_after is None else min(ctx.retry_after, delay)
    return kopf.TemporaryError(message, delay=delay)


def check_spec(ctx: Ctx) -> None:
    """Raise `StepBlocked` (DatabaseReady=False, reason InvalidSpec) for a spec with values
    the schema let through but nothing can apply (see `WorkspaceSpec.problems`)."""
    if ctx.spec.problems:
        ctx.conditions.set(DATABASE_READY, False, "InvalidSpec", "; ".join(ctx.spec.problems))
        raise StepBlocked("invalid spec")
