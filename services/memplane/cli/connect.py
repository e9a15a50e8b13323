"""Where the CLI finds the server and its key: flags, then MEMPLANE_TARGET /
MEMPLANE_API_KEY / MEMPLANE_ADMIN_KEY, then data_dir/credentials.json written by the
server's first local run (so the quick start needs no copy-paste). Without --target, the
per-service MEMPLANE_<SERVICE>_TARGET variables are honoured as by
`AsyncMemplaneClient.from_env` (the Secret of a MemoryWorkspace names one per Deployment). TLS: an "https://"
target, or `--ca-file` / MEMPLANE_TLS_CA_FILE (the CA bundle that signed the server's
certificate)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memplane.cli.usage import UsageError
from memplane.client.aio import DEFAULT_TARGET, SERVICE_NAMES, AsyncMemplaneClient
from memplane.server.credentials import CREDENTIALS_FILE, configured_admin_key, read_credentials
from memplane.server.settings import Settings


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=None,
        help="server host:port (default: MEMPLANE_TARGET, else MEMPLANE_GRPC__HOST:MEMPLANE_GRPC__PORT, "
        f"else {DEFAULT_TARGET})",
    )
    parser.add_argument("--api-key", default=None, help="workspace or admin API key")
    parser.add_argument(
        "--ca-file",
        default=None,
        help="PEM CA bundle that signed the server's TLS certificate; turns TLS on (env MEMPLANE_TLS_CA_FILE)",
    )


def _target(ns: argparse.Namespace, settings: Settings) -> str:
    if ns.target:
        return str(ns.target)
    return os.environ.get("MEMPLANE_TARGET") or f"{settings.grpc.host}:{settings.grpc.port}"


def _service_targets(ns: argparse.Namespace) -> dict[str, str]:
    """MEMPLANE_<SERVICE>_TARGET of each service set in the environment; none with --target."""
    if ns.target:
        return {}
    return {n: os.environ[v] for n in SERVICE_NAMES if os.environ.get(v := f"MEMPLANE_{n.upper()}_TARGET")}


def _root_certificates(ns: argparse.Namespace) -> bytes | None:
    """The CA bundle of --ca-file or MEMPLANE_TLS_CA_FILE, None when neither is set.
    Raises `UsageError` naming the file when it cannot be read."""
    path = getattr(ns, "ca_file", None) or os.environ.get("MEMPLANE_TLS_CA_FILE")
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--ca-file {path}: {exc.strerror or exc}") from None


def workspace_client(ns: argparse.Namespace, settings: Settings) -> AsyncMemplaneClient:
    """A client with the workspace key (flag, env, or the local default workspace's)."""
    key = (
        ns.api_key
        or os.environ.get("MEMPLANE_API_KEY")
        or read_credentials(settings.data_dir / CREDENTIALS_FILE).get("api_key", "")
    )
    return _client(_target(ns, settings), key, targets=_service_targets(ns), root_certificates=_root_certificates(ns))


def client_factory(
    ns: argparse.Namespace, settings: Settings, *, via: str = ""
) -> Callable[[str], AsyncMemplaneClient]:
    """Clients of the flags' and environment's target and TLS, each holding the key it is
    given (`memplane console`: one per signed-in person), naming the channel *via*
    (`AsyncMemplaneClient`). Raises `UsageError` as
    `workspace_client` does (an unreadable --ca-file) before any client is made."""
    target, targets, roots = _target(ns, settings), _service_targets(ns), _root_certificates(ns)
    return lambda key: _client(target, key, targets=targets, root_certificates=roots, via=via)


def admin_client(ns: argparse.Namespace, settings: Settings) -> AsyncMemplaneClient:
    """A client with the admin key (flag, env, settings, or the local credentials file)."""
    configured = configured_admin_key(settings.auth) or ""
    key = (
        ns.api_key
        or os.environ.get("MEMPLANE_ADMIN_KEY")
        or configured
        or read_credentials(settings.data_dir / CREDENTIALS_FILE).get("admin_key", "")
    )
    return _client(_target(ns, settings), key, root_certificates=_root_certificates(ns))


def _client(target: str, key: str, **options: Any) -> AsyncMemplaneClient:
    """`AsyncMemplaneClient(target, key, **options)`; raises `UsageError` for a target it
    refuses (no address, "http://" with TLS asked for)."""
    try:
        return AsyncMemplaneClient(target, key, **options)
    except ValueError as error:
        raise UsageError(str(error)) from None
