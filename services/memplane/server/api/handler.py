"""What every RPC handler shares: the caller's principal and error translation."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from memplane.domain.apikeys import VIA_CLIENTS, VIA_METADATA_KEY
from memplane.domain.models import Principal, Workspace
from memplane.errors import MemplaneError, PermissionDeniedError, UnauthenticatedError, WorkspaceDeletedError
from memplane.server.admin.auth import Authenticator
from memplane.server.api.errors import abort_with
from memplane.server.quota.fair import current_flow, flow_of

_log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self = TypeVar("Self")

# The call slots (`Authenticator.hold`) taken by the RPC running in this task; `rpc` releases them.
_slots: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "memplane_rpc_slots", default=None
)

# The name of the workspace `workspace_of` found for the RPC running in this task ("" before).
_workspace_name: contextvars.ContextVar[str] = contextvars.ContextVar("memplane_rpc_workspace", default="")


def bearer_token(context: Context) -> str:
    """The key of the `authorization: Bearer <key>` metadata entry ("" if absent).
    Raises `UnauthenticatedError` for another scheme or more than one entry."""
    values = [value for key, value in context.invocation_metadata() or () if key == "authorization"]
    if not values:
        return ""
    if len(values) > 1 or not isinstance(values[0], str):
        raise UnauthenticatedError("send exactly one 'authorization: Bearer <API key>' entry")
    scheme, _, token = values[0].partition(" ")
    if scheme.lower() != "bearer":
        raise UnauthenticatedError("authorization metadata must read 'Bearer <API key>'")
    return token.strip()


def via(principal: Principal, context: Context) -> Principal:
    """*principal* with actor ``console:<key id>`` when the call carries ``memplane-via:
    console`` (`memplane.domain.apikeys.VIA_METADATA_KEY`); unchanged otherwise."""
    values = [v for k, v in context.invocation_metadata() or () if k == VIA_METADATA_KEY]
    if len(values) != 1 or values[0] not in VIA_CLIENTS or not principal.actor.startswith("key:"):
        return principal
    return dataclasses.replace(principal, actor=f"{values[0]}:{principal.actor.removeprefix('key:')}")


async def workspace_of(authenticator: Authenticator, context: Context) -> tuple[Principal, Workspace]:
    """The caller and its workspace, holding one of the workspace's call slots until the
    `rpc` handler returns. Raises `UnauthenticatedError`, `PermissionDeniedError` for the
    admin key (it owns no memories), `QuotaExceededError` past the workspace's rate or
    concurrency limit; `RuntimeError` outside an `rpc` handler (a bug)."""
    slots = _slots.get()
    if slots is None:
        raise RuntimeError("workspace_of() must run inside an @rpc handler, which releases its call slot")
    principal = via(await authenticator.authenticate(bearer_token(context)), context)
    if principal.workspace is None:
        raise PermissionDeniedError("the admin key cannot read or write memories; use a workspace key")
    slots.append(await authenticator.hold(principal.workspace))
    _workspace_name.set(principal.workspace.name)
    current_flow.set(flow_of(principal.workspace))  # its share of the pool and the embedder
    return principal, principal.workspace


async def require_admin(authenticator: Authenticator, context: Context) -> Principal:
    """The caller if it holds the admin key; `PermissionDeniedError` for a workspace key."""
    principal = await authenticator.authenticate(bearer_token(context))
    if not principal.is_admin:
        raise PermissionDeniedError("AdminService needs the admin key")
    return principal


def rpc(
    method: Callable[[Self, Req, Context], Awaitable[Resp]],
) -> Callable[[Self, Req, Context], Awaitable[Resp]]:
    """Turn `MemplaneError`s into rich statuses (a `WorkspaceDeletedError` named after the
    caller's workspace) and anything else into INTERNAL (logged with its traceback, never
    echoed to the client). The call slots the handler took
    are released when it ends, however it ends (a cancelled or expired RPC included)."""

    @functools.wraps(method)
    async def wrapper(self: Self, request: Req, context: Context) -> Resp:
        slots: list[Callable[[], None]] = []
        token = _slots.set(slots)
        name_token = _workspace_name.set("")
        flow_token = current_flow.set(None)
        try:
            return await method(self, request, context)
        except MemplaneError as error:
            if isinstance(error, WorkspaceDeletedError) and not error.workspace and _workspace_name.get():
                error = WorkspaceDeletedError(_workspace_name.get())
            await abort_with(context, error)
            raise  # unreachable: abort raises
        except Exception:
            if context.code() is not None:  # already aborted by gRPC itself
                raise
            _log.exception("unhandled error in %s", method.__qualname__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")
            raise
        finally:
            for release in slots:
                release()
            _slots.reset(token)
            _workspace_name.reset(name_token)
            current_flow.reset(flow_token)

    return wrapper
