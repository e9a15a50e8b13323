"""Signed-in sessions, held in the console process's memory.

A session id is 256 random bits (the HttpOnly cookie's value); it maps to the API key,
the key's id, a CSRF token and the session's own `AsyncMemplaneClient`. Nothing of the
key reaches the browser. A session ends at sign-out, after `idle_seconds` without a
request, or when the same key opens more than `max_per_key` sessions (its least recently
used goes). A full store refuses new sign-ins (503) rather than end another key's session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from memplane.client import AsyncMemplaneClient
from memplane.console.errors import RefusedError
from memplane.domain.apikeys import split_key

Clock = Callable[[], float]
ClientFactory = Callable[[str], AsyncMemplaneClient]


@dataclass
class Session:
    """One signed-in person: the key's id (public), the CSRF token, the client, and
    whether the key is the admin key (workspaces and keys) or a workspace's (memories)."""

    session_id: str
    key_id: str
    csrf_token: str
    client: AsyncMemplaneClient
    last_used: float = field(default=0.0)
    admin: bool = False
    key_hash: str = ""  # SHA-256 of the key: its sessions are counted together


def key_id_of(api_key: str) -> str:
    """The public key id of ``mp_<key_id>_<secret>``; "" for a key of another shape."""
    parts = split_key(api_key)
    return parts[0] if parts else ""


class TooManySessionsError(RefusedError):
    """The store holds `max_sessions` live sessions: a sign-in is refused (503)."""

    def __init__(self) -> None:
        super().__init__(503, "TOO_MANY_SESSIONS", "too many console sessions; try again later")


class SessionStore:
    """Sessions by id. *idle_seconds* (default 8 h) ends an unused session;
    *max_per_key* (default 8) bounds one key's sessions (its least recently used goes);
    *max_sessions* (default 1,000) bounds memory and gRPC channels (past it a sign-in is
    refused: one key can never sign another out); *clock* is `time.monotonic` unless a
    test gives its own."""

    def __init__(
        self,
        client_factory: ClientFactory,
        *,
        idle_seconds: float = 8 * 3600.0,
        max_sessions: int = 1_000,
        max_per_key: int = 8,
        clock: Clock = time.monotonic,
    ) -> None:
        self._factory = client_factory
        self._idle = idle_seconds
        self._max = max_sessions
        self._max_per_key = max_per_key
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    async def open(self, api_key: str, client: AsyncMemplaneClient, *, admin: bool = False) -> Session:
        """A new session for *api_key* whose *client* has been checked against the
        server (*admin*: it is the admin key). Idle sessions end first; then the key's
        least recently used session when it holds `max_per_key`. Raises
        `TooManySessionsError` (503) when the store is still full; *client* is then the
        caller's to close."""
        await self._expire()
        key_hash = hashlib.sha256(api_key.encode()).hexdigest()
        mine = [sid for sid, s in self._sessions.items() if s.key_hash == key_hash]  # least recently used first
        for sid in mine[: max(0, len(mine) - self._max_per_key + 1)]:
            await self.close(sid)
        if len(self._sessions) >= self._max:
            raise TooManySessionsError
        session = Session(
            session_id=secrets.token_urlsafe(32),
            key_id=key_id_of(api_key),
            csrf_token=secrets.token_urlsafe(32),
            client=client,
            last_used=self._clock(),
            admin=admin,
            key_hash=key_hash,
        )
        self._sessions[session.session_id] = session
        return session

    def client_for(self, api_key: str) -> AsyncMemplaneClient:
        """A new client holding *api_key* (not yet a session's)."""
        return self._factory(api_key)

    async def get(self, session_id: str | None) -> Session | None:
        """The live session *session_id* names (its idle time restarts), else None."""
        await self._expire()
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        session.last_used = self._clock()
        self._sessions.move_to_end(session_id)
        return session

    async def close(self, session_id: str) -> None:
        """End a session (sign-out); unknown ids are ignored."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.client.close()

    async def close_all(self) -> None:
        """End every session (the console's shutdown)."""
        while self._sessions:
            _, session = self._sessions.popitem()
            await session.client.close()

    async def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            sid, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < self._idle:
                return
            del self._sessions[sid]
            await oldest.client.close()


def tokens_match(given: str | None, expected: str) -> bool:
    """Whether a request's CSRF token is the session's (constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
