"""AdminService: workspaces, API keys and usage (the operator's and CLI's entry point)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memplane.domain.apikeys import KEY_ID, importable
from memplane.domain.context import DEFAULT_TOKEN_ENCODING
from memplane.domain.models import ApiKeyRecord, Quotas, Retention, Workspace, WorkspaceUsage
from memplane.domain.names import WORKSPACE_NAME
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.admin import policy
from memplane.server.admin.auth import Authenticator
from memplane.server.embedding.base import Embedder
from memplane.server.settings import LimitsSettings
from memplane.server.storage.keys import ApiKeyStore
from memplane.server.storage.workspaces import WorkspaceStore, policy_columns
from memplane.server.validation import Violations, check_entries, check_text, check_workspace_name


def _valid_name(field: str, name: str) -> None:
    v = Violations()
    check_workspace_name(v, field, name)
    v.raise_if_any()


def _check_policy(
    v: Violations, quotas: Quotas, retention: Retention, labels: Mapping[str, str], token_encoding: str
) -> None:
    policy.check_quotas(v, "quotas", quotas)
    policy.check_retention(v, "retention", retention)
    policy.check_labels(v, "labels", labels)
    policy.check_token_encoding(v, "token_encoding", token_encoding)


def _page_size(v: Violations, page_size: int) -> int:
    size = page_size or 100
    if not 1 <= size <= 1000:
        v.add("page_size", "must be between 1 and 1000")
    return size


class AdminService:
    """Creates workspaces for the server's embedder (model and dimension recorded)."""

    def __init__(
        self,
        workspaces: WorkspaceStore,
        keys: ApiKeyStore,
        embedder: Embedder,
        authenticator: Authenticator,
        limits: LimitsSettings,
        *,
        clusters: Sequence[str] = (),
    ) -> None:
        """*clusters*: the names of the database clusters a workspace may be placed on
        (`database.clusters`; empty: placement is not asked for)."""
        self._clusters = tuple(clusters)
        self._workspaces = workspaces
        self._keys = keys
        self._embedder = embedder
        self._auth = authenticator
        self._limits = limits

    async def create_workspace(
        self,
        name: str,
        *,
        quotas: Quotas | None = None,
        retention: Retention | None = None,
        labels: Mapping[str, str] | None = None,
        token_encoding: str = "",
        placement: str = "",
    ) -> Workspace:
        """A new workspace with its partitions. *token_encoding* is the default of
        CompactionService requests ("" means o200k_base). *placement* names the database
        cluster to hold it ("": the cluster with the fewest workspaces). Raises
        `InvalidArgumentError` (name, quotas.*, retention.*, labels, token_encoding,
        placement), `AlreadyExistsError`, `UnavailableError` when the control cluster or
        the chosen one is down."""
        quotas, retention, labels = quotas or Quotas(), retention or Retention(), labels or {}
        v = Violations()
        check_workspace_name(v, "name", name)
        _check_policy(v, quotas, retention, labels, token_encoding)
        if placement and placement not in self._clusters:
            v.add("placement", f"names no database cluster of this server; choose one of {', '.join(self._clusters)}")
        v.raise_if_any()
        return await self._workspaces.create(
            name,
            embedding_model=self._embedder.model_id,
            embedding_dimensions=self._embedder.dimensions,
            policy=policy_columns(
                quotas=quotas,
                retention=retention,
                labels=labels,
                token_encoding=token_encoding or DEFAULT_TOKEN_ENCODING,
            ),
            placement=placement,
        )

    async def update_workspace(
        self,
        name: str,
        mask: Sequence[str],
        *,
        quotas: Quotas,
        retention: Retention,
        labels: Mapping[str, str],
        token_encoding: str,
    ) -> Workspace:
        """Replace the fields named in *mask* (`policy.UPDATE_PATHS`) with the given
        values; return the workspace as stored. This process's key cache forgets the
        workspace at once, other processes when PostgreSQL's notification reaches them
        (`memplane.server.storage.invalidation`) for the rate quota and retention (memory and byte quotas
        are read in each write's transaction, the token quota in each charge).
        Raises `InvalidArgumentError` (workspace.name, update_mask, the values), `NotFoundError`."""
        v = Violations()
        check_workspace_name(v, "workspace.name", name)
        if check_entries(v, "update_mask.paths", len(mask), self._limits.max_enum_entries):
            policy.check_update_mask(v, "update_mask", mask)
        _check_policy(v, quotas, retention, labels, token_encoding)
        v.raise_if_any()
        given = policy_columns(
            quotas=quotas, retention=retention, labels=labels, token_encoding=token_encoding or DEFAULT_TOKEN_ENCODING
        )
        groups: dict[str, tuple[str, ...]] = {
            "quotas": policy.QUOTA_FIELDS,
            "retention": ("default_ttl_seconds", "type_ttl_seconds"),
            "labels": ("labels",),
            "token_encoding": ("token_encoding",),
        }
        changes: dict[str, Any] = {}
        for path in mask:
            columns = groups.get(path) or (path.removeprefix("quotas."),)
            changes.update({c: given[c] for c in columns})
        updated = await self._workspaces.update(name, changes)
        self._auth.forget_workspace(name)
        return updated

    async def get_workspace(self, name: str) -> Workspace:
        """Raises `InvalidArgumentError` (name), `NotFoundError`."""
        _valid_name("name", name)
        return await self._workspaces.get(name)

    async def list_workspaces(self, page_size: int, page_token: str) -> tuple[list[Workspace], str]:
        """A page by name; the token is the last name of the previous page."""
        v = Violations()
        size = _page_size(v, page_size)
        if page_token and not WORKSPACE_NAME.match(page_token):
            v.add("page_token", "is not a token returned by ListWorkspaces")
        v.raise_if_any()
        found = await self._workspaces.list_page(after_name=page_token, limit=size + 1)
        if len(found) > size:
            return found[:size], found[size - 1].name
        return found, ""

    async def delete_workspace(self, name: str) -> int:
        """Drop everything of the workspace; return its memory count. Raises `NotFoundError`."""
        _valid_name("name", name)
        count = await self._workspaces.delete(name)
        self._auth.forget_workspace(name)
        return count

    async def create_api_key(self, workspace_name: str, display_name: str = "", api_key: str = "") -> tuple[str, str]:
        """Return (key id, full key): a new random key, or *api_key* imported (idempotent;
        see `ApiKeyStore.import_key`). Raises `NotFoundError`, `InvalidArgumentError`
        (workspace, display_name, api_key), `AlreadyExistsError`, `KeyRevokedError`."""
        v = Violations()
        check_workspace_name(v, "workspace", workspace_name)
        check_text(v, "display_name", display_name, self._limits.max_id_bytes)
        if api_key and not importable(api_key):
            v.add("api_key", "must read mp_<key id>_<secret>: key id 1-64 and secret 43-128 of A-Z, a-z, 0-9, '-'")
        v.raise_if_any()
        workspace = await self._workspaces.get(workspace_name)
        if api_key:
            return await self._keys.import_key(workspace.key, api_key, display_name), api_key
        return await self._keys.create(workspace.key, display_name)

    async def list_api_keys(
        self, workspace_name: str, page_size: int, page_token: str
    ) -> tuple[list[ApiKeyRecord], str]:
        """A page of the workspace's keys by key id (revoked ones included); the token is
        the last key id of the previous page. Raises `InvalidArgumentError`, `NotFoundError`."""
        v = Violations()
        check_workspace_name(v, "workspace", workspace_name)
        size = _page_size(v, page_size)
        if page_token and not KEY_ID.match(page_token):
            v.add("page_token", "is not a token returned by ListApiKeys")
        v.raise_if_any()
        workspace = await self._workspaces.get(workspace_name)
        found = await self._keys.list_page(workspace.key, after_key_id=page_token, limit=size + 1)
        if len(found) > size:
            return found[:size], found[size - 1].key_id
        return found, ""

    async def revoke_api_key(self, key_id: str) -> datetime:
        """Revoke at once in this process. Raises `InvalidArgumentError` (key_id),
        `NotFoundError`, `FailedPreconditionError` for an admin key (it is managed by
        configuration: MEMPLANE_AUTH__ADMIN_KEY or the local credentials file)."""
        if not KEY_ID.match(key_id):
            raise InvalidArgumentError(
                FieldViolation("key_id", "must be the key id printed by CreateApiKey (1-64 of A-Z, a-z, 0-9, -)")
            )
        revoked = await self._keys.revoke(key_id, admin_allowed=False)
        self._auth.forget_key(key_id)
        return revoked

    async def usage(self, name: str) -> WorkspaceUsage:
        """Raises `InvalidArgumentError` (name), `NotFoundError`."""
        _valid_name("name", name)
        return await self._workspaces.usage(name)
