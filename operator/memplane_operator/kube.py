"""The Kubernetes calls the operator makes beside kopf's own watching and patching: read,
create, patch and delete the Secrets, PersistentVolumeClaims and Namespaces it manages, and
read the StorageClass a claim asks for, through kr8s. Only direct calls by name (a GET,
never kr8s' polling `get`), so a missing object is answered at once."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import kr8s
from kr8s.asyncio.objects import APIObject, Namespace, PersistentVolumeClaim, Secret, new_class

__all__ = [
    "Kube",
    "KubeConflictError",
    "MemoryWorkspace",
    "Namespace",
    "PersistentVolumeClaim",
    "Secret",
    "StorageClass",
]

# The operator's own resource, for the writes kopf does not make (the file sync's status).
MemoryWorkspace = new_class(
    "MemoryWorkspace", version="memplane.io/v1alpha1", namespaced=True, plural="memoryworkspaces"
)
# What a local sandbox's claim asks for (read by name: its volumeBindingMode).
StorageClass = new_class("StorageClass", version="storage.k8s.io/v1", namespaced=False, plural="storageclasses")

Body = dict[str, Any]


class KubeConflictError(Exception):
    """409 from the API server: the object exists already, or changed since it was read
    (a resourceVersion precondition failed)."""


@contextlib.contextmanager
def _conflicts() -> Iterator[None]:
    """409 from the API server as `KubeConflictError`."""
    try:
        yield
    except kr8s.ServerError as error:
        if error.response is not None and error.response.status_code == 409:
            raise KubeConflictError(str(error)) from error
        raise


def _plain(obj: APIObject) -> Body:
    raw: Body = json.loads(json.dumps(obj.raw))  # a plain dict, detached from kr8s' Box
    return raw


class Kube:
    """Calls through one kr8s API client (kubeconfig or in-cluster ServiceAccount)."""

    def __init__(self, api: kr8s.asyncio.Api) -> None:
        self._api = api

    @property
    def api(self) -> kr8s.asyncio.Api:
        """The kr8s client (shared with the pod sandboxes the operator drives)."""
        return self._api

    def _object(self, kind: type[APIObject], name: str, namespace: str | None) -> APIObject:
        metadata: Body = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        return kind({"metadata": metadata}, api=self._api)

    async def read(self, kind: type[APIObject], name: str, namespace: str | None = None) -> Body | None:
        """The object as stored, or None when there is none."""
        obj = self._object(kind, name, namespace)
        try:
            await obj.refresh()
        except kr8s.NotFoundError:
            return None
        return _plain(obj)

    async def create(self, kind: type[APIObject], body: Body) -> Body:
        """Create *body*; return it as stored. Raises `KubeConflictError` if it exists."""
        obj = kind(body, api=self._api)
        with _conflicts():
            await obj.create()
        return _plain(obj)

    async def patch(
        self, kind: type[APIObject], name: str, namespace: str | None, patch: Body, *, subresource: str | None = None
    ) -> Body:
        """JSON merge patch (of *subresource*, e.g. "status", when given); a
        `metadata.resourceVersion` in *patch* makes it conditional. Raises
        `KubeConflictError` (changed since read), `kr8s.NotFoundError` (gone)."""
        obj = self._object(kind, name, namespace)
        with _conflicts():
            await obj.patch(patch, subresource=subresource)
        return _plain(obj)

    async def delete(self, kind: type[APIObject], name: str, namespace: str | None = None) -> bool:
        """Delete; False if it was already gone."""
        try:
            await self._object(kind, name, namespace).delete()
        except kr8s.NotFoundError:
            return False
        return True
