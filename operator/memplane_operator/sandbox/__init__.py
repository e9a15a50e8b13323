"""The sandbox of a MemoryWorkspace, from its SandboxClass.

Implemented here: `none` (no files) and `local` (a PersistentVolumeClaim the workspace's
files live on). The types with an adapter in `memplane_operator.backends` (docker, pod,
e2b) are driven through their `memplane.sandbox` backend
(`memplane_operator.sandbox.backed`); a type with none (only one a newer CRD allows) is
reported as SandboxReady=False, reason Unsupported.

When a live workspace moves to another SandboxClass (spec.sandbox.sandboxClassName edited,
or the default class changed), its old sandbox is released first by reclaimPolicy, as at
deletion: Delete destroys it (a container removed, a claim deleted), Retain keeps it (a
container stopped, a Pod deleted with its claim left, an E2B sandbox paused, a claim
left); then the new class's sandbox is made.

A local sandbox's claim carries no ownerReference: at deletion, reclaimPolicy decides
(Delete removes it, Retain keeps it for a re-created MemoryWorkspace of the same name).
SandboxReady of a local sandbox (`claim_condition`): True once its claim is Bound, or while
it waits for its first consumer (its StorageClass's volumeBindingMode is
WaitForFirstConsumer: it binds when a Pod that mounts it is scheduled); False, reason
ClaimPending, while it is Pending otherwise — the message says which StorageClass it asks
for and why it is not bound (none named and no default, a class that does not exist, a
provisioner that has not bound it yet) — looked at again after a backoff (1 s, doubling,
at most 60 s and the resync interval) until it binds; False, ClaimLost, once its volume is
lost (only a person can help).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memplane_operator import backends
from memplane_operator.conditions import SANDBOX_READY
from memplane_operator.context import Ctx, StepBlocked
from memplane_operator.crds import DEFAULT_CLASS_ANNOTATION
from memplane_operator.kube import KubeConflictError, Namespace, PersistentVolumeClaim, StorageClass
from memplane_operator.sandbox import backed

# SandboxClass index: class name -> (spec, annotations) of every SandboxClass.
ClassIndex = Mapping[str, Any]
BUILT_IN = frozenset({"none", "local"})  # provisioned by the operator itself, without a backend
CLAIM_SUFFIX = "-sandbox"
# Every field of status.sandbox: a status written whole names the absent ones as null (a
# merge patch keeps the fields it does not name).
STATUS_KEYS = ("className", "type", "claimName", "ref", "root", "state", "lastActivityTime", "lastSyncTime")


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


async def _ensure_claim(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The local sandbox's claim, made if absent; as stored."""
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
    return claim or {}


def claim_condition(
    name: str, claim: Mapping[str, Any], storage_class: Mapping[str, Any] | None, size: str
) -> tuple[bool, str, str]:
    """SandboxReady (status, reason, message) of the local sandbox whose claim *name* is
    *claim*, asking for *storage_class* (its StorageClass as stored; None when it names
    none or that class does not exist). See the module's docstring."""
    phase = str((claim.get("status") or {}).get("phase") or "Pending")
    if phase == "Bound":
        return True, "Provisioned", f"PersistentVolumeClaim {name} ({phase}, {size})"
    if phase == "Lost":
        return False, "ClaimLost", f"PersistentVolumeClaim {name} lost its volume"
    asked = str((claim.get("spec") or {}).get("storageClassName") or "")
    if storage_class is not None and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
        says = f"PersistentVolumeClaim {name} ({size}, StorageClass {asked!r}) binds when the first Pod that mounts it"
        return True, "WaitingForFirstConsumer", says + " is scheduled"
    if not asked:
        why = ": it names no StorageClass and the cluster has no default one"
    elif storage_class is None:
        why = f": it asks for StorageClass {asked!r}, which does not exist"
    else:
        why = f" yet (StorageClass {asked!r}, provisioner {storage_class.get('provisioner')})"
    return False, "ClaimPending", f"PersistentVolumeClaim {name} is not bound{why}"


async def _claim_ready(ctx: Ctx, class_name: str, spec: Mapping[str, Any]) -> None:
    """SandboxReady of the local sandbox (`claim_condition`). Raises `StepBlocked` for a lost
    claim, `SandboxUnavailableError` (retried with backoff) while it is pending."""
    claim = await _ensure_claim(ctx, class_name, spec)
    asked = str((claim.get("spec") or {}).get("storageClassName") or "")
    storage_class = await ctx.runtime.kube.read(StorageClass, asked) if asked else None
    ready, reason, message = claim_condition(claim_name(ctx), claim, storage_class, ctx.spec.storage_size)
    if reason == "ClaimLost":
        ctx.conditions.set(SANDBOX_READY, False, reason, message)
        raise StepBlocked(message)
    if not ready:
        raise backed.retried(ctx, class_name, reason, message)
    ctx.runtime.sandbox_failures.pop(ctx.uid, None)
    ctx.conditions.set(SANDBOX_READY, True, reason, message)


def _supported() -> str:
    return ", ".join(sorted(BUILT_IN | set(backends.ADAPTERS)))


async def ensure_sandbox(ctx: Ctx, classes: ClassIndex) -> None:
    """The sandbox the workspace's class asks for exists (a sandbox of a class it left is
    released first). Sets SandboxReady and status.sandbox. Raises `StepBlocked` for a
    missing or unsupported class, a namespace the class does not allow, a lost claim,
    invalid class parameters or a backend's refusal; `SandboxUnavailableError` while a
    backend is out of reach or a sandbox is not ready yet (a Pod, a pending claim)."""
    resolved = resolve_class(ctx, classes)
    cleared = await _release_previous(ctx, classes, resolved[0] if resolved else None)
    if resolved is None:
        ctx.status["sandbox"] = {**cleared, **dict.fromkeys(STATUS_KEYS), "type": "none"}
        ctx.conditions.set(SANDBOX_READY, True, "NoSandbox", "no sandbox requested and no default SandboxClass")
        return
    class_name, spec = resolved
    kind = spec.get("type", "none")
    ctx.status["sandbox"] = {**cleared, "className": class_name, "type": kind}
    if not await _allowed(ctx, spec):
        ctx.conditions.set(
            SANDBOX_READY,
            False,
            "NamespaceNotAllowed",
            f"SandboxClass {class_name!r} does not allow namespace {ctx.namespace!r} (spec.allowedNamespaces)",
        )
        raise StepBlocked(class_name)
    if kind not in BUILT_IN and backends.adapter_for(kind) is None:
        ctx.conditions.set(
            SANDBOX_READY,
            False,
            "Unsupported",
            f"sandbox type {kind!r} (SandboxClass {class_name!r}) has no backend in this operator yet; "
            f"supported: {_supported()}",
        )
        raise StepBlocked(kind)
    if kind == "none":
        ctx.status["sandbox"] = {**dict.fromkeys(STATUS_KEYS), "className": class_name, "type": kind}
        ctx.conditions.set(SANDBOX_READY, True, "NoSandbox", f"SandboxClass {class_name!r} is of type none")
        return
    if kind != "local":
        await backed.ensure_backed(ctx, class_name, spec)
        return
    ctx.status["sandbox"] = {
        **dict.fromkeys(STATUS_KEYS),
        "className": class_name,
        "type": kind,
        "claimName": claim_name(ctx),
    }
    await _claim_ready(ctx, class_name, spec)


def class_spec(classes: ClassIndex, name: str) -> dict[str, Any] | None:
    """The spec of SandboxClass *name* from the index; None when there is none."""
    found = _only(classes.get(name, ())) if name else None
    return None if found is None else dict(found[0])


async def _release_previous(ctx: Ctx, classes: ClassIndex, current: str | None) -> dict[str, None]:
    """The sandbox status.sandbox records of a class other than *current*, released by
    reclaimPolicy (see the module's docstring). Returns the status fields that forget it
    (every recorded one, as null), or {} when there was none to release."""
    recorded = ctx.recorded_sandbox()
    previous = str(recorded.get("className") or "")
    if not previous or previous == current:
        return {}
    destroy = ctx.spec.reclaim_policy == "Delete"
    if recorded.get("ref") and recorded.get("type") in backends.ADAPTERS:
        done = await backed.release_backed(ctx, recorded, class_spec(classes, previous), destroy=destroy)
    elif recorded.get("claimName"):
        done = f"claim {claim_name(ctx)} " + ("deleted" if destroy and await _delete_claim(ctx) else "kept")
    else:
        done = "nothing to release"
    ctx.logger.info("left SandboxClass %r (%s): %s", previous, ctx.spec.reclaim_policy, done)
    return dict.fromkeys(recorded)


async def release_sandbox(ctx: Ctx, classes: ClassIndex) -> str:
    """At deletion, by reclaimPolicy: Delete deletes the local sandbox's claim (if it is the
    one the operator made for this workspace: its labels say so; absent is fine) and
    destroys a backend's sandbox; Retain keeps both (a backend's sandbox suspended).
    Returns what was done (for logs). Raises `SandboxUnavailableError` while the backend is
    out of reach (the finalizer stays)."""
    destroy = ctx.spec.reclaim_policy == "Delete"
    recorded = ctx.recorded_sandbox()
    kind = str(recorded.get("type") or "")
    if kind in backends.ADAPTERS:  # a ref not recorded yet (cut short after the create): found by name
        spec = class_spec(classes, str(recorded.get("className") or ""))
        return await backed.release_backed(ctx, recorded, spec, destroy=destroy)
    if not destroy:
        return "sandbox claim kept"
    return f"sandbox claim deleted: {await _delete_claim(ctx)}"


async def _delete_claim(ctx: Ctx) -> bool:
    """Delete the local sandbox's claim if the operator made it for this workspace."""
    claim = await ctx.runtime.kube.read(PersistentVolumeClaim, claim_name(ctx), ctx.namespace)
    labels = ((claim or {}).get("metadata") or {}).get("labels") or {}
    ours = labels.get("app.kubernetes.io/managed-by") == "memplane-operator"
    if claim is None or not ours or labels.get("memplane.io/workspace") != ctx.spec.tenant_id:
        return False
    return await ctx.runtime.kube.delete(PersistentVolumeClaim, claim_name(ctx), ctx.namespace)
