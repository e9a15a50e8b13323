"""Making the admin key known at start (and, on a local first run, the default workspace
and its key): `bootstrap`, run by every process the composition root builds."""

from __future__ import annotations

import logging

from memplane.domain.apikeys import generate_api_key
from memplane.errors import AlreadyExistsError, KeyRevokedError
from memplane.server.admin.service import AdminService
from memplane.server.credentials import CREDENTIALS_FILE, configured_admin_key, read_credentials, write_credentials
from memplane.server.settings import Settings
from memplane.server.storage.keys import ApiKeyStore

_log = logging.getLogger(__name__)

DEFAULT_WORKSPACE = "default"


async def bootstrap(settings: Settings, keys: ApiKeyStore, admin: AdminService) -> None:
    """Make the admin key known.

    A configured key (`auth.admin_key`, or the mounted file of `auth.admin_key_file`: a
    cluster's Secret) is installed as the one admin key, revoking every other admin key,
    and nothing is written to disk: a copy of a Secret on pod disk is a leak, and the root
    filesystem is read-only. With nothing configured (a local first run) the admin key of
    data_dir/credentials.json (mode 0600) is used, or a new one generated and written
    there first; with `auth.bootstrap_default_workspace`, workspace "default" and a key
    for the CLI are created and written beside it. Raises `FailedPreconditionError` when
    the configured key file cannot be read or credentials.json cannot be written,
    `KeyRevokedError` for a configured key that another has replaced."""
    configured = configured_admin_key(settings.auth)
    if configured is not None:
        replaced = await keys.install_admin_key(configured, "admin (configured)", replace=True)
        if replaced:
            _log.info("the configured admin key replaced %d other admin key(s): %s", len(replaced), ", ".join(replaced))
        return
    path = settings.data_dir / CREDENTIALS_FILE
    stored = read_credentials(path)
    admin_key = stored.get("admin_key")
    if admin_key is not None and await keys.verify(admin_key) is None:
        try:
            await keys.install_admin_key(admin_key, "admin (local)")
        except KeyRevokedError:
            admin_key = None  # a configured key replaced it: make a new local one
    if admin_key is None:
        _, admin_key = generate_api_key()
        stored["admin_key"] = admin_key
        write_credentials(path, stored)  # on disk before it is valid: never a key nobody holds
        await keys.install_admin_key(admin_key, "admin (generated)")
    if settings.auth.bootstrap_default_workspace:
        try:
            await admin.create_workspace(DEFAULT_WORKSPACE)
            _log.info("created workspace %r", DEFAULT_WORKSPACE)
            stored.pop("api_key", None)
        except AlreadyExistsError:
            pass
        if not stored.get("api_key") or await keys.verify(stored["api_key"]) is None:
            _, stored["api_key"] = await admin.create_api_key(DEFAULT_WORKSPACE, "default (generated)")
        stored.setdefault("workspace", DEFAULT_WORKSPACE)
    if stored != read_credentials(path):
        write_credentials(path, stored)
