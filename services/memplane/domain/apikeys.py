"""The API key format, shared by the server (which stores keys hashed) and the client SDK
(the operator generates keys, writes them to a Kubernetes Secret, then imports them).

A key reads ``mp_<key_id>_<secret>``: the key id is public (it names the key to revoke);
the secret is 256 random bits, URL-safe base64 without "_" (43 characters).
"""

from __future__ import annotations

import re
import secrets

KEY_PREFIX = "mp"

# gRPC metadata by which a client names the channel a person acts through; the server
# records that person's writes with actor ``<via>:<key_id>`` instead of ``key:<key_id>``
# (memory history). A label of the channel, not a credential: the key id stays the key's,
# and a value outside VIA_CLIENTS is ignored.
VIA_METADATA_KEY = "memplane-via"
VIA_CLIENTS = frozenset({"console"})
KEY_ID = re.compile(r"^[A-Za-z0-9-]{1,64}\Z")
SECRET = re.compile(r"^[A-Za-z0-9-]{43,128}\Z")  # an imported secret carries at least 256 bits


def split_key(api_key: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed key, else None."""
    parts = api_key.split("_")
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def importable(api_key: str) -> bool:
    """Whether *api_key* may be imported (CreateApiKeyRequest.api_key): the format, a key
    id of 1-64 and a secret of 43-128 characters of A-Z, a-z, 0-9 and '-'."""
    parts = split_key(api_key)
    return parts is not None and bool(KEY_ID.match(parts[0])) and bool(SECRET.match(parts[1]))


def generate_api_key() -> tuple[str, str]:
    """A new random key: (key id, full key). The key id is 16 hex digits."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32).replace("_", "-")
    return key_id, f"{KEY_PREFIX}_{key_id}_{secret}"
