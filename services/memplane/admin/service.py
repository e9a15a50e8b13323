"""AdminService: workspaces, API keys and usage (the operator's and CLI's entry point)."""

from __future__ import annotations

import re
from datetime import datetime

from memplane.admin.auth import Authenticator
from memplane.domain.context import DEFAULT_TOKEN_ENCODING, TOKEN_ENCODINGS
from memplane.domain.models import Workspace, WorkspaceUsage
from memplane.domain.validation import WORKSPACE_NAME, Violations, check_text, check_workspace_name
from memplane.embedding.base import Embedder
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.settings import LimitsSettings
from memplane.storage.keys import ApiKeyStore
from memplane.storage.workspaces import WorkspaceStore


def _valid_name(field: str, name: str) -> None:
    v = Violations()
    check_workspace_name(v, field, name)
    v.raise_if_any()


KEY_ID = re.compile(r"^[A-Za-z0-9-]{1,64}\Z")  # the id part of mp_<id>_<secret>


class AdminService:
    """Creates workspaces for the server's embedder (model and dimension recorded)."""

    def __init__(
        self,
        workspaces: WorkspaceStore,
        keys: ApiKeyStore,
        embedder: Embedder,
        authenticator: Authenticator,
        limits: LimitsSettings,
    ) -> None:
        self._workspaces = workspaces
        self._keys = keys
        self._embedder = embedder
        self._auth = authenticator
        self._limits = limits

    async def create_workspace(self, name: str, max_memories: int = 0, token_encoding: str = "") -> Workspace:
        """*token_encoding* is the default of CompactionService requests ("" means
        o200k_base). Raises `InvalidArgumentError` (name, max_memories, token_encoding),
        `AlreadyExistsError`."""
        v = Violations()
        check_workspace_name(v, "name", name)
        if max_memories < 0:
            v.add("max_memories", "must not be negative")
        if token_encoding and token_encoding not in TOKEN_ENCODINGS:
            v.add("token_encoding", f"must be one of {', '.join(TOKEN_ENCODINGS)}")
        v.raise_if_any()
        return await self._workspaces.create(
            name,
            embedding_model=self._embedder.model_id,
            embedding_dimensions=self._embedder.dimensions,
            max_memories=max_memories,
            token_encoding=token_encoding or DEFAULT_TOKEN_ENCODING,
        )

    async def get_workspace(self, name: str) -> Workspace:
        """Raises `InvalidArgumentError` (name), `NotFoundError`."""
        _valid_name("name", name)
        return await self._workspaces.get(name)

    async def list_workspaces(self, page_size: int, page_token: str) -> tuple[list[Workspace], str]:
        """A page by name; the token is the last name of the previous page."""
        v = Violations()
        size = page_size or 100
        if not 1 <= size <= 1000:
            v.add("page_size", "must be between 1 and 1000")
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

    async def create_api_key(self, workspace_name: str, display_name: str = "") -> tuple[str, str]:
        """Return (key id, full key). Raises `NotFoundError`, `InvalidArgumentError`."""
        v = Violations()
        check_workspace_name(v, "workspace", workspace_name)
        check_text(v, "display_name", display_name, self._limits.max_id_bytes)
        v.raise_if_any()
        workspace = await self._workspaces.get(workspace_name)
        return await self._keys.create(workspace.key, display_name)

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
