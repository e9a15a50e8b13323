"""memplane.v1.AdminService over `memplane.server.admin.service.AdminService` (admin key only)."""

from __future__ import annotations

from memplane import convert
from memplane.server.admin.auth import Authenticator
from memplane.server.admin.service import AdminService
from memplane.server.api.admin_convert import (
    api_key_to_proto,
    quotas_from_proto,
    retention_from_proto,
    workspace_to_proto,
)
from memplane.server.api.handler import Context, require_admin, rpc
from memplane.v1 import admin_pb2, admin_pb2_grpc


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """Workspaces, keys, usage."""

    def __init__(self, service: AdminService, authenticator: Authenticator) -> None:
        self._service = service
        self._auth = authenticator

    @rpc
    async def CreateWorkspace(
        self, request: admin_pb2.CreateWorkspaceRequest, context: Context
    ) -> admin_pb2.CreateWorkspaceResponse:
        await require_admin(self._auth, context)
        workspace = await self._service.create_workspace(
            request.name,
            quotas=quotas_from_proto(request.quotas),
            retention=retention_from_proto(request.retention),
            labels=dict(request.labels),
            token_encoding=request.token_encoding,
            placement=request.placement,
        )
        return admin_pb2.CreateWorkspaceResponse(workspace=workspace_to_proto(workspace))

    @rpc
    async def GetWorkspace(
        self, request: admin_pb2.GetWorkspaceRequest, context: Context
    ) -> admin_pb2.GetWorkspaceResponse:
        await require_admin(self._auth, context)
        workspace = await self._service.get_workspace(request.name)
        return admin_pb2.GetWorkspaceResponse(workspace=workspace_to_proto(workspace))

    @rpc
    async def UpdateWorkspace(
        self, request: admin_pb2.UpdateWorkspaceRequest, context: Context
    ) -> admin_pb2.UpdateWorkspaceResponse:
        await require_admin(self._auth, context)
        given = request.workspace
        workspace = await self._service.update_workspace(
            given.name,
            list(request.update_mask.paths),
            quotas=quotas_from_proto(given.quotas),
            retention=retention_from_proto(given.retention, "workspace.retention"),
            labels=dict(given.labels),
            token_encoding=given.token_encoding,
        )
        return admin_pb2.UpdateWorkspaceResponse(workspace=workspace_to_proto(workspace))

    @rpc
    async def ListWorkspaces(
        self, request: admin_pb2.ListWorkspacesRequest, context: Context
    ) -> admin_pb2.ListWorkspacesResponse:
        await require_admin(self._auth, context)
        found, token = await self._service.list_workspaces(request.page_size, request.page_token)
        return admin_pb2.ListWorkspacesResponse(
            workspaces=[workspace_to_proto(w) for w in found], next_page_token=token
        )

    @rpc
    async def DeleteWorkspace(
        self, request: admin_pb2.DeleteWorkspaceRequest, context: Context
    ) -> admin_pb2.DeleteWorkspaceResponse:
        await require_admin(self._auth, context)
        count = await self._service.delete_workspace(request.name)
        return admin_pb2.DeleteWorkspaceResponse(deleted_memory_count=count)

    @rpc
    async def CreateApiKey(
        self, request: admin_pb2.CreateApiKeyRequest, context: Context
    ) -> admin_pb2.CreateApiKeyResponse:
        await require_admin(self._auth, context)
        key_id, api_key = await self._service.create_api_key(request.workspace, request.display_name, request.api_key)
        return admin_pb2.CreateApiKeyResponse(key_id=key_id, api_key=api_key)

    @rpc
    async def RevokeApiKey(
        self, request: admin_pb2.RevokeApiKeyRequest, context: Context
    ) -> admin_pb2.RevokeApiKeyResponse:
        await require_admin(self._auth, context)
        revoked = await self._service.revoke_api_key(request.key_id)
        return admin_pb2.RevokeApiKeyResponse(revoke_time=convert.timestamp(revoked))

    @rpc
    async def ListApiKeys(
        self, request: admin_pb2.ListApiKeysRequest, context: Context
    ) -> admin_pb2.ListApiKeysResponse:
        await require_admin(self._auth, context)
        found, token = await self._service.list_api_keys(request.workspace, request.page_size, request.page_token)
        return admin_pb2.ListApiKeysResponse(api_keys=[api_key_to_proto(k) for k in found], next_page_token=token)

    @rpc
    async def GetWorkspaceUsage(
        self, request: admin_pb2.GetWorkspaceUsageRequest, context: Context
    ) -> admin_pb2.GetWorkspaceUsageResponse:
        await require_admin(self._auth, context)
        usage = await self._service.usage(request.name)
        return admin_pb2.GetWorkspaceUsageResponse(
            memory_count=usage.memory_count,
            content_bytes=usage.content_bytes,
            transcript_message_count=usage.transcript_message_count,
            storage_bytes=usage.storage_bytes,
            embedding_tokens_today=usage.embedding_tokens_today,
            tool_result_bytes=usage.tool_result_bytes,
        )
