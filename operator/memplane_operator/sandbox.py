"""The sandbox of a MemoryWorkspace, from its SandboxClass.

Implemented here: `none` (no files) and `local` (a PersistentVolumeClaim the workspace's
files live on). `pod`, `docker` and `e2b` need the sandbox backends of the sandbox/files
work and are reported as SandboxReady=False, reason Unsupported, until they land.

A local sandbox's claim carries no ownerReference: at deletion, reclaimPolicy decides
(Delete removes it, Retain keeps it for a re-created MemoryWorkspace of the same name).
A claim stays Pending until a pod mounts it where the StorageClass binds on first
consumer, so SandboxReady means "the claim exists and is not Lost", and its phase is
reported in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memplane_operator.conditions import SANDBOX_READY
from memplane_operator.context import Ctx, StepBlocked
from memplane_operator.crds import DEFAULT_CLASS_ANNOTATION
from memplane_operator.kube import KubeConflictError, Namespace, PersistentVolumeClaim

# SandboxClass index: class name -> (spec, annotations) of every SandboxClass.
ClassIndex = Mapping[str, Any]
SUPPORTED = frozenset({"none", "local"})
CLAIM_SUFFIX = "-sandbox"


def claim_name(ctx: Ctx) -> str:
    """The PersistentVolumeClaim of a local sandbox."""
    return f"{ctx.name}{CLAIM_SUFFIX}"


def _only(entries: Any) -> Any:
    """A kopf index value is a store of the entries of matching objects; names are unique."""
    for entry in entries:
        return entry
    return None


def resolve_class(ctx: Ctx, classes: ClassIndex) -> tuple[str, dict[str, Any]] | None:
    """(name, spec) of the class the workspace asks for, or of the default class when it
    asks for none; None when it asks for none and there is no default. Raises
    `StepBlocked` (SandboxClassNotFound) for a name no SandboxClass has."""
    wanted = ctx.spec.sandbox_class
    if wanted:
        found = _only(classes.get(wanted, ()))
        if found is None:
            ctx.conditions.set(
                SANDBOX_READY, False, "SandboxClassNotFound", f"no SandboxClass {wanted!r} (kubectl get sandboxclasses)"
            )
            raise StepBlocked(wanted)
        return wanted, dict(found[0])
    defaults = sorted(
        name
        for name in classes
        for spec, annotations in classes[name]
        if annotations.get(DEFAULT_CLASS_ANNOTATION) == "true"
    )
    if not defaults:
        return None
    return defaults[0], dict(_only(classes[defaults[0]])[0])


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (matchLabels and matchExpressions, ANDed)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


async def _allowed(ctx: Ctx, spec: Mapping[str, Any]) -> bool:
    selector = spec.get("allowedNamespaces")
    if not selector:
        return True
    namespace = await ctx.runtime.kube.read(Namespace, ctx.namespace)
    labels = (namespace or {}).get("metadata", {}).get("labels") or {}
    return _matches(selector, labels)


async def _ensure_claim(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> str:
    local = spec.get("local") or {}
    name = claim_name(ctx)
    kube = ctx.runtime.kube
    claim = await kube.read(PersistentVolumeClaim, name, ctx.namespace)
    if claim is None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": name,
                "namespace": ctx.namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "memplane-operator",
                    "memplane.io/workspace": ctx.spec.tenant_id,
                    "memplane.io/sandbox-class": class_name,
                },
            },
            "spec": {
                "accessModes": local.get("accessModes") or ["ReadWriteOnce"],
                "resources": {"requests": {"storage": ctx.spec.storage_size}},
            },
        }
        if local.get("storageClassName"):
            body["spec"]["storageClassName"] = local["storageClassName"]
        try:
            claim = await kube.create(PersistentVolumeClaim, body)
            ctx.logger.info("created PersistentVolumeClaim %s", name)
        except KubeConflictError:
            claim = await kube.read(PersistentVolumeClaim, name, ctx.namespace)
    phase = ((claim or {}).get("status") or {}).get("phase", "Pending")
    if phase == "Lost":
        ctx.conditions.set(SANDBOX_READY, False, "ClaimLost", f"PersistentVolumeClaim {name} lost its volume")
        raise StepBlocked(name)
    return str(phase)


async def ensure_sandbox(ctx: Ctx, classes: ClassIndex) -> None:
    """The sandbox the workspace's class asks for exists. Sets SandboxReady and
    status.sandbox. Raises `StepBlocked` for a missing or unsupported class, a namespace
    the class does not allow, or a lost claim."""
    resolved = resolve_class(ctx, classes)
    if resolved is None:
        ctx.status["sandbox"] = {"type": "none"}
        ctx.conditions.set(SANDBOX_READY, True, "NoSandbox", "no sandbox requested and no default SandboxClass")
        return
    class_name, spec = resolved
    kind = spec.get("type", "none")
    ctx.status["sandbox"] = {"className": class_name, "type": kind}
    if not await _allowed(ctx, spec):
        ctx.conditions.set(
            SANDBOX_READY,
            False,
            "NamespaceNotAllowed",
            f"SandboxClass {class_name!r} does not allow namespace {ctx.namespace!r} (spec.allowedNamespaces)",
        )
        raise StepBlocked(class_name)
    if kind not in SUPPORTED:
        ctx.conditions.set(
            SANDBOX_READY,
            False,
            "Unsupported",
            f"sandbox type {kind!r} (SandboxClass {class_name!r}) is not implemented yet; none and local are",
        )
        raise StepBlocked(kind)
    if kind == "none":
        ctx.conditions.set(SANDBOX_READY, True, "NoSandbox", f"SandboxClass {class_name!r} is of type none")
        return
    phase = await _ensure_claim(ctx, class_name, spec)
    ctx.status["sandbox"]["claimName"] = claim_name(ctx)
    ctx.conditions.set(
        SANDBOX_READY,
        True,
        "Provisioned",
        f"PersistentVolumeClaim {claim_name(ctx)} ({phase}, {ctx.spec.storage_size})",
    )


async def release_sandbox(ctx: Ctx) -> bool:
    """At deletion: with reclaimPolicy Delete, delete the local sandbox's claim if it is the
    one the operator made for this workspace (its labels say so; absent is fine), whether or
    not the workspace still exists; with Retain keep it. Returns whether one was deleted."""
    if ctx.spec.reclaim_policy != "Delete":
        return False
    claim = await ctx.runtime.kube.read(PersistentVolumeClaim, claim_name(ctx), ctx.namespace)
    labels = ((claim or {}).get("metadata") or {}).get("labels") or {}
    ours = labels.get("app.kubernetes.io/managed-by") == "memplane-operator"
    if claim is None or not ours or labels.get("memplane.io/workspace") != ctx.spec.tenant_id:
        return False
    return await ctx.runtime.kube.delete(PersistentVolumeClaim, claim_name(ctx), ctx.namespace)
