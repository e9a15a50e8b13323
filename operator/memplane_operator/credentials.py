"""The credentials Secret of a MemoryWorkspace and the API key in it.

The Secret is the source of truth: a key is generated here, written to the Secret first,
then imported into memplane (CreateApiKey with `api_key`, idempotent). A crash between
the two leaves a key that the next reconcile imports; it never leaves a registered key
nobody holds, nor a second key. Rotation (annotation memplane.io/rotate set to a new value)
writes the new key and, in the same atomic update, the previous key id and when to revoke
it; the resync revokes it after the grace period.

Data keys (for `envFrom`): MEMPLANE_TARGET, MEMPLANE_API_KEY, MEMPLANE_WORKSPACE, and
MEMPLANE_<SERVICE>_TARGET per service when the operator is given service_targets.
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memplane.client import generate_api_key
from memplane.domain.apikeys import importable, split_key
from memplane.errors import AlreadyExistsError, KeyRevokedError, NotFoundError
from memplane_operator.conditions import CREDENTIALS_READY
from memplane_operator.context import ROTATE_ANNOTATION, Ctx, StepBlocked
from memplane_operator.kube import Body, KubeConflictError, Secret

TARGET, API_KEY, WORKSPACE = "MEMPLANE_TARGET", "MEMPLANE_API_KEY", "MEMPLANE_WORKSPACE"
KEY_ID_ANNOTATION = "memplane.io/key-id"
ROTATED_FOR_ANNOTATION = "memplane.io/rotated-for"
PREVIOUS_KEY_ANNOTATION = "memplane.io/previous-key-id"
REVOKE_AFTER_ANNOTATION = "memplane.io/previous-key-revoke-after"
MANAGED_BY = {"app.kubernetes.io/managed-by": "memplane-operator"}
_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Stored:
    """What a credentials Secret holds (data decoded)."""

    secret: Body
    data: dict[str, str]

    @property
    def api_key(self) -> str:
        return self.data.get(API_KEY, "")

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.secret["metadata"].get("annotations") or {})

    @property
    def resource_version(self) -> str:
        return str(self.secret["metadata"]["resourceVersion"])


def _decode(secret: Body) -> Stored:
    def text(value: str) -> str:
        try:
            return base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            return ""

    return Stored(secret=secret, data={k: text(v) for k, v in (secret.get("data") or {}).items()})


def _owned_by(secret: Body, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in secret["metadata"].get("ownerReferences") or [])


def _key_id(api_key: str) -> str:
    parts = split_key(api_key)
    return parts[0] if parts else ""


def _data(ctx: Ctx, api_key: str) -> dict[str, str]:
    settings = ctx.runtime.settings
    data = {TARGET: settings.agent_target, API_KEY: api_key, WORKSPACE: ctx.spec.tenant_id}
    data.update({f"MEMPLANE_{name.upper()}_TARGET": address for name, address in settings.service_targets.items()})
    return data


async def _write_new_key(ctx: Ctx, stored: Stored | None, *, rotate: bool) -> str:
    """A fresh key into the Secret (created, or updated only if unchanged since read);
    with *rotate*, the old key is kept valid for the grace period. Returns the key."""
    _, api_key = generate_api_key()
    token = ctx.annotations.get(ROTATE_ANNOTATION, "")
    annotations: dict[str, str | None] = {KEY_ID_ANNOTATION: _key_id(api_key), ROTATED_FOR_ANNOTATION: token}
    kube = ctx.runtime.kube
    if stored is None:
        body: Body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": ctx.spec.secret_name,
                "namespace": ctx.namespace,
                "labels": {**MANAGED_BY, "memplane.io/workspace": ctx.spec.tenant_id},
                "annotations": annotations,
                "ownerReferences": [ctx.owner_reference()],
            },
            "stringData": _data(ctx, api_key),
        }
        await kube.create(Secret, body)  # KubeConflictError: another reconcile won; retried
        return api_key
    if rotate and importable(stored.api_key):
        pending = stored.annotations.get(PREVIOUS_KEY_ANNOTATION)
        if pending:  # a rotation during the previous one's grace: the oldest key goes now
            await _revoke(ctx, pending)
        revoke_after = datetime.now(UTC) + timedelta(seconds=ctx.spec.grace_seconds)
        annotations[PREVIOUS_KEY_ANNOTATION] = _key_id(stored.api_key)
        annotations[REVOKE_AFTER_ANNOTATION] = revoke_after.strftime(_TIME)
    patch: Body = {
        "metadata": {"resourceVersion": stored.resource_version, "annotations": annotations},
        "stringData": _data(ctx, api_key),
    }
    await kube.patch(Secret, ctx.spec.secret_name, ctx.namespace, patch)
    return api_key


async def _own_keys(ctx: Ctx) -> dict[str, bool]:
    """The keys made for this object (by display name) in its workspace: key id -> whether
    still valid. Empty when the workspace is gone."""
    keys: dict[str, bool] = {}
    token = ""
    with contextlib.suppress(NotFoundError):
        while True:
            page = await ctx.runtime.admin.list_api_keys(ctx.spec.tenant_id, page_size=1000, page_token=token)
            for key in page.api_keys:
                if key.display_name == ctx.key_display_name:
                    keys[key.key_id] = not key.HasField("revoke_time")
            token = page.next_page_token
            if not token:
                break
    return keys


async def _revoke(ctx: Ctx, key_id: str) -> bool:
    """Revoke *key_id* only if it is one of this object's own valid keys: key ids are not
    secret, and an id written into the Secret's annotations by whoever can edit it must not
    revoke another tenant's key. Returns whether it was revoked."""
    if not (await _own_keys(ctx)).get(key_id, False):
        ctx.logger.warning("key %s is not a valid key of this MemoryWorkspace; not revoked", key_id)
        return False
    with contextlib.suppress(NotFoundError):  # revoked meanwhile
        await ctx.runtime.admin.revoke_api_key(key_id)
    return True


async def _revoke_stale(ctx: Ctx, keep: set[str]) -> None:
    """Revoke this object's valid keys other than *keep* (a key replaced because its Secret
    was deleted or damaged, or moved with spec.credentials.secretName)."""
    for key_id, valid in (await _own_keys(ctx)).items():
        if valid and key_id not in keep:
            with contextlib.suppress(NotFoundError):
                await ctx.runtime.admin.revoke_api_key(key_id)
            ctx.logger.info("revoked API key %s, replaced by %s", key_id, ", ".join(sorted(keep)))


async def _import(ctx: Ctx, api_key: str) -> bool:
    """Register *api_key*; False when memplane refuses it for good (revoked out of band,
    or its key id taken), so a new key must replace it."""
    try:
        await ctx.runtime.admin.create_api_key(ctx.spec.tenant_id, ctx.key_display_name, api_key=api_key)
    except (KeyRevokedError, AlreadyExistsError) as error:
        ctx.logger.warning("the key in Secret %s is refused (%s); writing a new one", ctx.spec.secret_name, error)
        return False
    return True


async def ensure_credentials(ctx: Ctx) -> None:
    """The Secret exists, is ours, holds a key memplane accepts for this workspace and the
    current target; a pending rotation is done. Sets CredentialsReady, status.secretName and
    status.keyId. Raises `StepBlocked` when a Secret of that name belongs to something else,
    `KubeConflictError` when the Secret changed under us (kopf retries the step)."""
    kube = ctx.runtime.kube
    secret = await kube.read(Secret, ctx.spec.secret_name, ctx.namespace)
    if secret is not None and not _owned_by(secret, ctx.uid):
        ctx.conditions.set(
            CREDENTIALS_READY,
            False,
            "SecretOwnedElsewhere",
            f"Secret {ctx.spec.secret_name} exists and is not owned by this MemoryWorkspace; "
            "choose another spec.credentials.secretName or delete it",
        )
        raise StepBlocked(ctx.spec.secret_name)
    stored = _decode(secret) if secret is not None else None
    token = ctx.annotations.get(ROTATE_ANNOTATION, "")
    if stored is None or not importable(stored.api_key):
        api_key = await _write_new_key(ctx, stored, rotate=False)
    elif token and stored.annotations.get(ROTATED_FOR_ANNOTATION, "") != token:
        api_key = await _write_new_key(ctx, stored, rotate=True)
    else:
        api_key = stored.api_key
        desired = _data(ctx, api_key)
        if any(stored.data.get(k) != v for k, v in desired.items()):  # keys others added are left alone
            patch = {"metadata": {"resourceVersion": stored.resource_version}, "stringData": desired}
            await kube.patch(Secret, ctx.spec.secret_name, ctx.namespace, patch)
    if not await _import(ctx, api_key):
        current = await kube.read(Secret, ctx.spec.secret_name, ctx.namespace)
        api_key = await _write_new_key(ctx, _decode(current) if current is not None else None, rotate=False)
        if not await _import(ctx, api_key):
            raise KubeConflictError("a freshly generated key was refused; retrying")
    current = await kube.read(Secret, ctx.spec.secret_name, ctx.namespace)
    previous = _decode(current).annotations.get(PREVIOUS_KEY_ANNOTATION, "") if current is not None else ""
    await _revoke_stale(ctx, {_key_id(api_key), previous} - {""})
    await _forget_old_secret(ctx)
    ctx.status.update(secretName=ctx.spec.secret_name, keyId=_key_id(api_key))
    ctx.conditions.set(
        CREDENTIALS_READY,
        True,
        "KeyActive",
        f"API key {_key_id(api_key)} in Secret {ctx.spec.secret_name} (MEMPLANE_TARGET, MEMPLANE_API_KEY)",
    )


async def _forget_old_secret(ctx: Ctx) -> None:
    """After spec.credentials.secretName changed: delete the Secret of the old name (if it
    is this object's own; its key was just revoked as stale)."""
    old = str(ctx.observed.get("secretName") or "")
    if not old or old == ctx.spec.secret_name:
        return
    secret = await ctx.runtime.kube.read(Secret, old, ctx.namespace)
    if secret is not None and _owned_by(secret, ctx.uid):
        await ctx.runtime.kube.delete(Secret, old, ctx.namespace)
        ctx.logger.info("deleted the previous credentials Secret %s", old)


async def revoke_expired_previous_key(ctx: Ctx) -> None:
    """After a rotation's grace period, revoke the previous key and forget it."""
    secret = await ctx.runtime.kube.read(Secret, ctx.spec.secret_name, ctx.namespace)
    if secret is None or not _owned_by(secret, ctx.uid):
        return
    stored = _decode(secret)
    previous, after = stored.annotations.get(PREVIOUS_KEY_ANNOTATION), stored.annotations.get(REVOKE_AFTER_ANNOTATION)
    if not previous:
        return
    due = datetime.strptime(after, _TIME).replace(tzinfo=UTC) if after else datetime.min.replace(tzinfo=UTC)
    if due > datetime.now(UTC):
        return
    await _revoke(ctx, previous)
    ctx.logger.info("revoked the previous API key %s after its grace period", previous)
    patch = {
        "metadata": {
            "resourceVersion": stored.resource_version,
            "annotations": {PREVIOUS_KEY_ANNOTATION: None, REVOKE_AFTER_ANNOTATION: None},
        }
    }
    await ctx.runtime.kube.patch(Secret, ctx.spec.secret_name, ctx.namespace, patch)


async def release_credentials(ctx: Ctx) -> int:
    """At deletion: revoke every key made for this object (found by display name, so an
    orphan of any past failure goes too) and delete its Secret (the current and, after a
    rename, the previous one). Returns keys revoked. Tolerates a workspace or Secret
    already gone."""
    revoked = 0
    for key_id, valid in (await _own_keys(ctx)).items():
        if valid:
            with contextlib.suppress(NotFoundError):
                await ctx.runtime.admin.revoke_api_key(key_id)
            revoked += 1
    for name in {ctx.spec.secret_name, str(ctx.observed.get("secretName") or "")} - {""}:
        secret = await ctx.runtime.kube.read(Secret, name, ctx.namespace)
        if secret is not None and _owned_by(secret, ctx.uid):
            await ctx.runtime.kube.delete(Secret, name, ctx.namespace)
    return revoked


async def current_key(ctx: Ctx) -> str | None:
    """The workspace's API key as its Secret holds it now (read on every call, kept in
    memory only), or None when the Secret is missing, not this object's own, or holds no
    key memplane would take (the credentials step is then not done)."""
    secret = await ctx.runtime.kube.read(Secret, ctx.spec.secret_name, ctx.namespace)
    if secret is None or not _owned_by(secret, ctx.uid):
        return None
    api_key = _decode(secret).api_key
    return api_key if importable(api_key) else None
