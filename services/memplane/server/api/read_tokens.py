"""Read-your-writes tokens that tell a tenant nothing about other tenants.

A write's `memplane-lsn` trailing metadata used to be the primary's WAL position in the
clear; WAL is shared by every tenant, so its growth between two of a tenant's writes
showed how much all the others wrote in between. The token is now

    "<counter>.<base64url(nonce ‖ AES-256-GCM(WAL position))>"

- *counter*: the workspace's own history-event counter (the last id of its event
  sequence, migration 0014) read with the position, after the write's commit. It moves
  only with this workspace's writes, and orders its tokens: the client keeps the one
  with the highest counter (`memplane.domain.consistency.newest_token`). A token with
  counter c was cut after every event up to c had committed (the position is read once
  the writers still holding ids up to c have ended: `memplane_settled_event_counter`),
  so its position covers them all; ties (a write that recorded no memory event) cover
  the same memories.
- the sealed part: the 8-byte position under AES-GCM (NIST SP 800-38D) with a random
  96-bit nonce, so two tokens of one position differ, and with the workspace key and the
  counter as associated data, so a token is refused by any other workspace and a counter
  cannot be edited. The key is `server_secrets.read_token` (migration 0009), shared by
  every server process through the database.

`ReadTokens.open` gives the position back to the read router; a token that does not open
(edited, another workspace's, another installation's) is INVALID_ARGUMENT naming
`memplane-lsn`.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from collections.abc import Awaitable, Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memplane.domain.consistency import LSN_METADATA_KEY
from memplane.domain.models import Workspace
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.api.handler import Context

_NONCE_BYTES = 12  # GCM's recommended IV length (SP 800-38D, 8.2)
_POSITION = struct.Struct(">Q")


def _aad(workspace_key: int, counter: int) -> bytes:
    return f"memplane-lsn:{workspace_key}:{counter}".encode()


def _refused(reason: str) -> InvalidArgumentError:
    return InvalidArgumentError(FieldViolation(LSN_METADATA_KEY, f"{reason}; send a token a write returned"))


class ReadTokens:
    """Seals and opens tokens with the 32-byte *key*. Raises `ValueError` for a key of
    another length."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError(f"a read-token key is 32 bytes, got {len(key)}")
        self._aead = AESGCM(key)

    def seal(self, workspace_key: int, counter: int, lsn: str) -> str:
        """The token of WAL position *lsn* ("X/Y" hex) for *workspace_key* at event *counter*."""
        high, _, low = lsn.partition("/")
        position = (int(high, 16) << 32) | int(low, 16)
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, _POSITION.pack(position), _aad(workspace_key, counter))
        return f"{counter}.{base64.urlsafe_b64encode(nonce + sealed).rstrip(b'=').decode()}"

    def open(self, workspace_key: int, token: str) -> str:
        """The WAL position ("X/Y") sealed in *token* for *workspace_key*. Raises
        `InvalidArgumentError` naming `memplane-lsn` when it is malformed, edited, or
        another workspace's."""
        counter, dot, body = token.partition(".")
        if not dot or not counter.isdigit() or len(counter) > 19:
            raise _refused("not a read-your-writes token '<counter>.<sealed position>'")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise _refused("its sealed part is not base64url") from None
        try:
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _aad(workspace_key, int(counter)))
        except (InvalidTag, ValueError):
            raise _refused("it does not open for this workspace (edited, or another workspace's)") from None
        if len(plain) != _POSITION.size:
            raise _refused("it holds no WAL position")
        (position,) = _POSITION.unpack(plain)
        return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


WritePosition = Callable[[int], Awaitable[tuple[str, int] | None]]
"""`ReadRouter.write_position`: (WAL position, the workspace's event counter) after the
caller's commits, or None when no replica serves reads."""


class ReadYourWrites:
    """The `memplane-lsn` metadata of every RPC: a write's reply carries a token, a read
    request may send one back. Without a replica (*tokens* None) writes carry none and a
    read ignores one (every read is on the primary and sees every write)."""

    def __init__(self, tokens: ReadTokens | None, position: WritePosition) -> None:
        self._tokens = tokens
        self._position = position

    async def stamp(self, context: Context, workspace: Workspace) -> None:
        """After a successful write: the token of the primary's position now, in the
        trailing metadata. Raises `UnavailableError` if the primary cannot be reached."""
        if self._tokens is None:
            return
        position = await self._position(workspace.key)
        if position is not None:
            lsn, counter = position
            context.set_trailing_metadata(((LSN_METADATA_KEY, self._tokens.seal(workspace.key, counter, lsn)),))

    def after(self, context: Context, workspace: Workspace) -> str:
        """The WAL position ("X/Y", "" for none) a read must see: the one sealed in the
        request's `memplane-lsn` entry (the last, if several). Raises
        `InvalidArgumentError` naming `memplane-lsn` for a token that does not open."""
        if self._tokens is None:
            return ""
        values = [value for key, value in context.invocation_metadata() or () if key == LSN_METADATA_KEY]
        if not values:
            return ""
        return self._tokens.open(workspace.key, str(values[-1]))
