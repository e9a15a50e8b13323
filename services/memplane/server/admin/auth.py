"""From an API key to a `Principal`: the workspace always comes from the credential.

Verified keys are cached for `key_cache_seconds` (a hash lookup per RPC otherwise costs a
database round trip); a revoke, workspace update or deletion evicts at once in this
process, and in every other one when PostgreSQL's notification arrives
(`memplane.server.storage.invalidation`, which pauses the cache while it cannot listen). Every
call of a workspace key passes the workspace's `max_requests_per_second`, and holds one
of its `quota.max_concurrent_requests_per_workspace` slots while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from memplane.domain.apikeys import split_key
from memplane.domain.models import Principal, Workspace
from memplane.errors import NotFoundError, UnauthenticatedError
from memplane.server.quota.concurrency import ConcurrencyLimiter, Release
from memplane.server.quota.rate import RateLimiter
from memplane.server.storage.keys import ApiKeyStore
from memplane.server.storage.workspaces import WorkspaceStore


class Authenticator:
    """Verifies bearer keys against the key store."""

    def __init__(
        self,
        keys: ApiKeyStore,
        workspaces: WorkspaceStore,
        cache_seconds: float,
        limiter: RateLimiter | None = None,
        concurrency: ConcurrencyLimiter | None = None,
        *,
        reachable: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        """*reachable*: `await reachable(workspace_key)` raises `UnavailableError` while the
        database cluster holding that workspace is down (`RoutedDatabase.reachable`), so a
        call of such a workspace fails before it does any work (embedding, a model call)."""
        self._reachable = reachable
        self._keys = keys
        self._limiter = limiter or RateLimiter()
        self._concurrency = concurrency or ConcurrencyLimiter(0)
        self._workspaces = workspaces
        self._ttl = cache_seconds
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._caching = True
        # Bumped by every eviction: a verification that began before one is not cached
        # (it may have read the key just before the revoke committed).
        self._generation = 0

    async def authenticate(self, api_key: str) -> Principal:
        """The principal of *api_key*. Raises `UnauthenticatedError` for a missing,
        malformed, unknown or revoked key, or a key whose workspace is gone;
        `QuotaExceededError` past the workspace's `max_requests_per_second`;
        `UnavailableError` while the workspace's database cluster is down."""
        principal = await self._principal(api_key)
        if self._reachable is not None and principal.workspace is not None:
            await self._reachable(principal.workspace.key)
        return principal

    async def _principal(self, api_key: str) -> Principal:
        if not api_key:
            raise UnauthenticatedError("missing credential: send 'authorization: Bearer <API key>'")
        cached = self._cache.get(api_key) if self._caching else None
        if cached is not None and cached[0] > time.monotonic():
            return self._admitted(cached[1])
        generation = self._generation
        record = await self._keys.verify(api_key)
        if record is None:
            raise UnauthenticatedError("unknown or revoked API key")
        workspace = None
        if record.workspace_key is not None:
            try:
                workspace = await self._workspaces.get_by_key(record.workspace_key)
            except NotFoundError:  # deleted between the two reads
                raise UnauthenticatedError("unknown or revoked API key") from None
        principal = Principal(actor=f"key:{record.key_id}", workspace=workspace)
        if self._ttl > 0 and self._caching and generation == self._generation:
            self._cache[api_key] = (time.monotonic() + self._ttl, principal)
        return self._admitted(principal)

    def _admitted(self, principal: Principal) -> Principal:
        if principal.workspace is not None:
            self._limiter.admit(principal.workspace)
        return principal

    async def hold(self, workspace: Workspace) -> Release:
        """A call slot of *workspace* (`ConcurrencyLimiter.acquire`, waiting in line for one
        when all are taken): release it when the call ends. Raises `QuotaExceededError`
        (quota_id ``max_concurrent_requests``) when the line is full too."""
        return await self._concurrency.acquire(workspace)

    def forget_key(self, key_id: str) -> None:
        """Evict a key from the cache (after a revoke)."""
        self._generation += 1
        for api_key in [k for k in self._cache if (split_key(k) or ("", ""))[0] == key_id]:
            del self._cache[api_key]

    def forget_workspace(self, name: str) -> None:
        """Evict every key of a workspace (after its update or deletion)."""
        self._generation += 1
        for api_key in [k for k, (_, p) in self._cache.items() if p.workspace is not None and p.workspace.name == name]:
            del self._cache[api_key]

    def pause_cache(self) -> None:
        """Evict everything and cache nothing until `resume_cache` (while revocations from
        other processes could go unheard)."""
        self._caching = False
        self._evict_all()

    def resume_cache(self) -> None:
        """Evict everything and cache again (revocations are heard from now on)."""
        self._caching = True
        self._evict_all()

    def _evict_all(self) -> None:
        self._generation += 1
        self._cache.clear()
