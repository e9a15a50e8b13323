"""The memplane workspace of a MemoryWorkspace: ownership, creation, quotas and retention,
usage, and its end (reclaimPolicy). Every call goes through the AdminService.

Ownership is recorded on the workspace itself (labels memplane.io/namespace, /name, /uid):
- the same uid: ours (a reconcile after a crash finds it and creates nothing);
- the same namespace and name, another uid: a MemoryWorkspace re-created after a Retain
  deletion; it adopts the retained data;
- anything else (another namespace, or a workspace made with the CLI): Conflict, and
  nothing of that workspace is touched, now or at deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memplane.errors import AlreadyExistsError, NotFoundError
from memplane.v1 import admin_pb2
from memplane_operator.conditions import CONFLICT, DATABASE_READY, QUOTA_EXCEEDED
from memplane_operator.context import OWNER_LABELS, Ctx, StepBlocked

# One index entry per MemoryWorkspace: (namespace, name, uid, creationTimestamp).
TenantClaim = tuple[str, str, str, str]


def earlier_claim(ctx: Ctx, claims: Iterable[TenantClaim]) -> TenantClaim | None:
    """Another MemoryWorkspace claiming the same tenantId before this one (by creation time,
    then uid), if any: the first claim wins, the later ones are Conflict.

    creationTimestamp has one-second resolution, so two objects made in the same second
    tie and the uid decides — unless this one already holds the workspace (its status
    names it): a holder loses only to a claim from a strictly earlier second, so the
    arrival of a same-second duplicate never takes a Ready workspace away from its owner
    (the duplicate then meets the owner labels: WorkspaceOwnedElsewhere)."""
    holds = bool(ctx.observed.get("workspace")) and ctx.observed.get("workspace") == ctx.spec.tenant_id
    mine: TenantClaim | None = None
    others: list[TenantClaim] = []
    for claim in claims:
        if claim[2] == ctx.uid:
            mine = claim
        else:
            others.append(claim)
    if mine is None:
        return min(others, key=lambda c: (c[3], c[2])) if others else None
    earlier = [c for c in others if (c[3] < mine[3] if holds else (c[3], c[2]) < (mine[3], mine[2]))]
    return min(earlier, key=lambda c: (c[3], c[2])) if earlier else None


def _owner(labels: Mapping[str, str]) -> tuple[str, str, str]:
    namespace, name, uid = (labels.get(k, "") for k in OWNER_LABELS)
    return namespace, name, uid


def _conflict(ctx: Ctx, reason: str, message: str) -> StepBlocked:
    ctx.conditions.set(CONFLICT, True, reason, message)
    ctx.conditions.set(DATABASE_READY, False, reason, message)
    return StepBlocked(message)


def check_claims(ctx: Ctx, claims: Iterable[TenantClaim]) -> None:
    """Raise `StepBlocked` (Conflict=True) when an earlier MemoryWorkspace claims the tenantId.
    The message names nothing of that object (it may be another tenant's): an operator's
    admin finds it in the operator's debug log, or with `kubectl get memoryworkspaces -A`."""
    earlier = earlier_claim(ctx, claims)
    if earlier is not None:
        ctx.logger.debug("tenantId %r is held by MemoryWorkspace %s/%s", ctx.spec.tenant_id, earlier[0], earlier[1])
        raise _conflict(
            ctx,
            "DuplicateTenantId",
            f"tenantId {ctx.spec.tenant_id!r} is already used by another MemoryWorkspace: choose another one",
        )


async def owned_workspace(ctx: Ctx) -> admin_pb2.Workspace | None:
    """The workspace if it exists and belongs to this object (same uid); None otherwise."""
    try:
        found = await ctx.runtime.admin.get_workspace(ctx.spec.tenant_id)
    except NotFoundError:
        return None
    return found if _owner(found.labels)[2] == ctx.uid else None


async def ensure_workspace(ctx: Ctx) -> admin_pb2.Workspace:
    """The workspace exists and is ours (created, found, or adopted after a Retain
    deletion); its embedding model is the one spec.embedding declares. Sets Conflict and
    DatabaseReady. Raises `StepBlocked` on a conflict or an embedding mismatch."""
    admin = ctx.runtime.admin
    tenant = ctx.spec.tenant_id
    try:
        workspace = await admin.get_workspace(tenant)
    except NotFoundError:
        try:
            workspace = await admin.create_workspace(
                tenant,
                quotas=ctx.spec.quotas,
                retention=ctx.spec.retention,
                labels=ctx.owner_labels,
                placement=ctx.spec.placement,
            )
            ctx.logger.info("created workspace %s", tenant)
        except AlreadyExistsError:  # created meanwhile (another reconcile, the CLI): judge it as found
            workspace = await admin.get_workspace(tenant)
    namespace, name, uid = _owner(workspace.labels)
    if uid != ctx.uid:
        if (namespace, name) != (ctx.namespace, ctx.name):  # named in the debug log only (another tenant's)
            ctx.logger.debug("workspace %r is held by %s", tenant, f"{namespace}/{name}" if uid else "no object")
            raise _conflict(
                ctx,
                "WorkspaceOwnedElsewhere",
                f"workspace {tenant!r} exists and belongs to another owner: choose another tenantId",
            )
        labels = {**workspace.labels, **ctx.owner_labels}
        workspace = await admin.update_workspace(admin_pb2.Workspace(name=tenant, labels=labels), ["labels"])
        ctx.logger.info("adopted the retained workspace %s", tenant)
    ctx.conditions.set(CONFLICT, False, "Unique", f"tenantId {tenant!r} belongs to this MemoryWorkspace")
    mismatch = ctx.spec.embedding.mismatch(workspace.embedding_model, workspace.embedding_dimensions)
    if mismatch:
        ctx.conditions.set(DATABASE_READY, False, "EmbeddingMismatch", f"spec.embedding declares {mismatch}")
        raise StepBlocked(mismatch)
    ctx.status["workspace"] = tenant
    ctx.status["placement"] = workspace.placement
    if not ctx.conditions.is_true(DATABASE_READY, current=True):
        ctx.conditions.set(
            DATABASE_READY, True, "Provisioned", f"workspace {tenant!r}; quotas and retention not applied yet"
        )
    return workspace


async def ensure_policy(ctx: Ctx) -> None:
    """The workspace's quotas and retention equal the spec (UpdateWorkspace when they
    drift). Sets DatabaseReady."""
    workspace = await ctx.runtime.admin.get_workspace(ctx.spec.tenant_id)
    changed = [
        path
        for path, have, want in (
            ("quotas", workspace.quotas, ctx.spec.quotas),
            ("retention", workspace.retention, ctx.spec.retention),
        )
        if have != want
    ]
    if changed:
        desired = admin_pb2.Workspace(name=ctx.spec.tenant_id, quotas=ctx.spec.quotas, retention=ctx.spec.retention)
        await ctx.runtime.admin.update_workspace(desired, changed)
        ctx.logger.info("pushed %s of workspace %s", " and ".join(changed), ctx.spec.tenant_id)
    ctx.conditions.set(
        DATABASE_READY,
        True,
        "Provisioned",
        f"workspace {ctx.spec.tenant_id!r} ({workspace.embedding_model}, {workspace.embedding_dimensions}-d); "
        "quotas and retention applied",
    )


# Unchanged usage keeps its measuredTime this long, so a resync of an idle workspace writes
# nothing (an identical status patch is a no-op for the API server: no new resourceVersion).
USAGE_REFRESH_SECONDS = 300


def _measured_time(previous: Mapping[str, Any], figures: Mapping[str, int]) -> str:
    now = datetime.now(UTC)
    stamp = previous.get("measuredTime")
    if stamp and all(previous.get(k) == v for k, v in figures.items()):
        seen = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        if (now - seen).total_seconds() < USAGE_REFRESH_SECONDS:
            return str(stamp)
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _over(used: int, limit: int) -> bool:
    return bool(limit) and used >= limit


async def report_usage(ctx: Ctx) -> None:
    """status.usage from GetWorkspaceUsage, and QuotaExceeded when a count or size quota is reached."""
    usage = await ctx.runtime.admin.get_workspace_usage(ctx.spec.tenant_id)
    quotas = ctx.spec.quotas
    figures = {
        "memories": usage.memory_count,
        "bytes": usage.content_bytes,
        "toolResultBytes": usage.tool_result_bytes,
        "storageBytes": usage.storage_bytes,
        "embeddingTokensToday": usage.embedding_tokens_today,
    }
    ctx.status["usage"] = {**figures, "measuredTime": _measured_time(ctx.observed.get("usage") or {}, figures)}
    reached: list[str] = []
    if _over(usage.memory_count, quotas.max_memories):
        reached.append(f"maxMemories ({usage.memory_count} of {quotas.max_memories})")
    if _over(usage.content_bytes + usage.tool_result_bytes, quotas.max_bytes):
        reached.append(f"maxBytes ({usage.content_bytes + usage.tool_result_bytes} of {quotas.max_bytes})")
    if _over(usage.embedding_tokens_today, quotas.max_embedding_tokens_per_day):
        reached.append(f"maxEmbeddingTokensPerDay ({usage.embedding_tokens_today} today)")
    if reached:
        ctx.conditions.set(QUOTA_EXCEEDED, True, "QuotaReached", "writes are refused: " + ", ".join(reached))
    else:
        ctx.conditions.set(QUOTA_EXCEEDED, False, "WithinQuota", "every quota has room")


async def reclaim_workspace(ctx: Ctx) -> dict[str, Any]:
    """At deletion, by spec.reclaimPolicy: Delete erases the workspace (NOT_FOUND is fine),
    Retain keeps it (and its owner labels, so the same namespace/name can adopt it again).
    Does nothing to a workspace this object does not own. Returns what was done (for logs)."""
    workspace = await owned_workspace(ctx)
    if workspace is None:
        return {"workspace": "not owned; untouched"}
    if ctx.spec.reclaim_policy != "Delete":
        return {"workspace": "retained"}
    try:
        deleted = await ctx.runtime.admin.delete_workspace(ctx.spec.tenant_id)
    except NotFoundError:
        deleted = 0
    return {"workspace": "deleted", "memories": deleted}
