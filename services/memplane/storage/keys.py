"""API keys, stored as SHA-256 hashes of high-entropy secrets.

A key reads ``mp_<key_id>_<secret>``: the key id is public (it names the key to revoke)
and the 256-bit random secret is only ever stored hashed. A fast hash is the right
tool for random secrets (no dictionary to guard against), as in GitHub's and Stripe's
token schemes; password hashes (bcrypt, argon2) are for low-entropy human secrets.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from memplane.domain.models import ApiKeyRecord
from memplane.errors import FailedPreconditionError, NotFoundError
from memplane.storage.database import Database

KEY_PREFIX = "mp"


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def split_key(api_key: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed key, else None."""
    parts = api_key.split("_")
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


class ApiKeyStore:
    """Create, verify and revoke keys (admin transactions)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self, workspace_key: int | None, display_name: str = "", *, api_key: str | None = None
    ) -> tuple[str, str]:
        """Create a key for a workspace (None: an admin key); return (key_id, full key).

        *api_key* imports a given key (e.g. the configured admin key) instead of a new one.
        """
        if api_key is not None:
            parts = split_key(api_key)
            if parts is None:
                raise ValueError("an imported API key must read mp_<key id>_<secret>")
            key_id, secret = parts
        else:
            key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32).replace("_", "-")
        async with self._db.admin() as conn:
            await conn.execute(
                "INSERT INTO api_keys (key_id, workspace_key, secret_hash, display_name) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (key_id) DO UPDATE SET secret_hash = EXCLUDED.secret_hash, revoked_at = NULL",
                (key_id, workspace_key, _hash(secret), display_name),
            )
        return key_id, f"{KEY_PREFIX}_{key_id}_{secret}"

    async def verify(self, api_key: str) -> ApiKeyRecord | None:
        """The record of a valid, unrevoked key; None for anything else."""
        parts = split_key(api_key)
        if parts is None:
            return None
        key_id, secret = parts
        async with self._db.admin() as conn:
            cur = await conn.execute(
                "SELECT k.key_id, k.secret_hash, k.revoked_at, k.workspace_key, w.name"
                " FROM api_keys k LEFT JOIN workspaces w ON w.key = k.workspace_key WHERE k.key_id = %s",
                (key_id,),
            )
            row = await cur.fetchone()
        if row is None or row["revoked_at"] is not None:
            return None
        if not hmac.compare_digest(bytes(row["secret_hash"]), _hash(secret)):
            return None
        return ApiKeyRecord(
            key_id=row["key_id"], workspace_name=row["name"], workspace_key=row["workspace_key"], revoked_at=None
        )

    async def revoke(self, key_id: str, *, admin_allowed: bool = True) -> datetime:
        """Mark a key revoked; return the time. Raises `NotFoundError`, and
        `FailedPreconditionError` for an admin key unless *admin_allowed*."""
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
