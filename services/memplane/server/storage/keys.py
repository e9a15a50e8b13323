"""API keys, stored as SHA-256 hashes of high-entropy secrets.

A key reads ``mp_<key_id>_<secret>`` (`memplane.domain.apikeys`): the key id is public
(it names the key to revoke) and the 256-bit random secret is only ever stored hashed. A
fast hash is the right tool for random secrets (no dictionary to guard against), as in
GitHub's and Stripe's token schemes; password hashes (bcrypt, argon2) are for
low-entropy human secrets.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from typing import Any

from memplane.domain.apikeys import generate_api_key, split_key
from memplane.domain.models import ApiKeyRecord
from memplane.errors import AlreadyExistsError, FailedPreconditionError, KeyRevokedError, NotFoundError
from memplane.server.storage.database import Database

# Arbitrary constant identifying the admin-key installation lock (ASCII "mpadmink").
ADMIN_KEY_LOCK_ID = 0x6D7061646D696E6B


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _parts(api_key: str) -> tuple[str, str]:
    parts = split_key(api_key)
    if parts is None:
        raise ValueError("an API key must read mp_<key id>_<secret>")
    return parts


def _record(row: dict[str, Any]) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=row["key_id"],
        workspace_name=row["name"],
        workspace_key=row["workspace_key"],
        revoked_at=row["revoked_at"],
        display_name=row["display_name"],
        created_at=row["created_at"],
    )


class ApiKeyStore:
    """Create, import, verify, list and revoke keys (admin transactions)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, workspace_key: int | None, display_name: str = "") -> tuple[str, str]:
        """A new random key for a workspace (None: an admin key); return (key_id, full key)."""
        key_id, api_key = generate_api_key()
        async with self._db.admin() as conn:
            await conn.execute(
                "INSERT INTO api_keys (key_id, workspace_key, secret_hash, display_name) VALUES (%s, %s, %s, %s)",
                (key_id, workspace_key, _hash(_parts(api_key)[1]), display_name),
            )
        return key_id, api_key

    async def install_admin_key(self, api_key: str, display_name: str = "admin", *, replace: bool = False) -> list[str]:
        """Register an admin key: a new key id, or a new secret for an unrevoked admin key
        id. With *replace* (a key from configuration, the authority over admin keys) every
        other unrevoked admin key is revoked in the same transaction; workspace keys are
        never touched. Installs serialise on `pg_advisory_xact_lock(ADMIN_KEY_LOCK_ID)`, so
        servers starting with different keys leave exactly one valid: the last started.
        Returns the key ids revoked. Raises `ValueError` for a malformed key,
        `AlreadyExistsError` if the key id belongs to a workspace key, `KeyRevokedError` if
        it was revoked (replaced): a replaced admin key is never valid again."""
        key_id, secret = _parts(api_key)
        async with self._db.admin() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADMIN_KEY_LOCK_ID,))
            cur = await conn.execute(
                "SELECT workspace_key, revoked_at FROM api_keys WHERE key_id = %s FOR UPDATE", (key_id,)
            )
            row = await cur.fetchone()
            if row is not None and row["workspace_key"] is not None:
                raise AlreadyExistsError("api key", key_id)
            if row is not None and row["revoked_at"] is not None:
                raise KeyRevokedError(
                    f"the configured admin key {key_id!r} was replaced by another at"
                    f" {row['revoked_at']:%Y-%m-%d %H:%M %Z} and is never valid again: configure the current"
                    " admin key, or a new one"
                )
            await conn.execute(
                "INSERT INTO api_keys (key_id, workspace_key, secret_hash, display_name) VALUES (%s, NULL, %s, %s)"
                " ON CONFLICT (key_id) DO UPDATE SET secret_hash = EXCLUDED.secret_hash",
                (key_id, _hash(secret), display_name),
            )
            if not replace:
                return []
            cur = await conn.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE workspace_key IS NULL AND key_id <> %s"
                " AND revoked_at IS NULL RETURNING key_id",
                (key_id,),
            )
            return sorted(r["key_id"] for r in await cur.fetchall())

    async def import_key(self, workspace_key: int, api_key: str, display_name: str = "") -> str:
        """Register a key made by the caller (checked by `apikeys.importable` first) for a
        workspace; return its key id. Idempotent: the same key again is a success.
        Raises `AlreadyExistsError` when the key id holds another secret or belongs to
        another workspace, `KeyRevokedError` when this very key was revoked."""
        key_id, secret = _parts(api_key)
        digest = _hash(secret)
        async with self._db.admin() as conn:
            cur = await conn.execute(
                "INSERT INTO api_keys (key_id, workspace_key, secret_hash, display_name) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (key_id) DO NOTHING RETURNING key_id",
                (key_id, workspace_key, digest, display_name),
            )
            if await cur.fetchone() is not None:
                return key_id
            cur = await conn.execute(
                "SELECT workspace_key, secret_hash, revoked_at FROM api_keys WHERE key_id = %s", (key_id,)
            )
            row = await cur.fetchone()
        if (
            row is None
            or row["workspace_key"] != workspace_key
            or not hmac.compare_digest(bytes(row["secret_hash"]), digest)
        ):
            raise AlreadyExistsError("api key", key_id)
        if row["revoked_at"] is not None:
            raise KeyRevokedError(f"api key {key_id!r} was revoked; import a new key")
        return key_id

    async def verify(self, api_key: str) -> ApiKeyRecord | None:
        """The record of a valid, unrevoked key; None for anything else."""
        parts = split_key(api_key)
        if parts is None:
            return None
        key_id, secret = parts
        async with self._db.admin() as conn:
            cur = await conn.execute(
                "SELECT k.key_id, k.secret_hash, k.revoked_at, k.workspace_key, k.display_name, k.created_at, w.name"
                " FROM api_keys k LEFT JOIN workspaces w ON w.key = k.workspace_key WHERE k.key_id = %s",
                (key_id,),
            )
            row = await cur.fetchone()
        if row is None or row["revoked_at"] is not None:
            return None
        if not hmac.compare_digest(bytes(row["secret_hash"]), _hash(secret)):
            return None
        return _record(row)

    async def list_page(self, workspace_key: int, *, after_key_id: str, limit: int) -> list[ApiKeyRecord]:
        """Up to *limit* keys of a workspace (revoked ones included) with key ids after
        *after_key_id*, by key id."""
        async with self._db.admin() as conn:
            cur = await conn.execute(
                "SELECT k.key_id, k.revoked_at, k.workspace_key, k.display_name, k.created_at, w.name"
                " FROM api_keys k JOIN workspaces w ON w.key = k.workspace_key"
                " WHERE k.workspace_key = %s AND k.key_id > %s ORDER BY k.key_id LIMIT %s",
                (workspace_key, after_key_id, limit),
            )
            return [_record(r) for r in await cur.fetchall()]

    async def revoke(self, key_id: str, *, admin_allowed: bool = True) -> datetime:
        """Mark a key revoked (a revoked key keeps its first revoke time); return the time.
        Raises `NotFoundError`, and `FailedPreconditionError` for an admin key unless
        *admin_allowed*."""
        async with self._db.admin() as conn:
            cur = await conn.execute("SELECT workspace_key FROM api_keys WHERE key_id = %s", (key_id,))
            found = await cur.fetchone()
            if found is not None and found["workspace_key"] is None and not admin_allowed:
                raise FailedPreconditionError(
                    "the admin key is managed by configuration (MEMPLANE_AUTH__ADMIN_KEY or credentials.json)"
                )
            cur = await conn.execute(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE key_id = %s RETURNING revoked_at",
                (key_id,),
            )
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError("api key", key_id)
        revoked: datetime = row["revoked_at"]
        return revoked
