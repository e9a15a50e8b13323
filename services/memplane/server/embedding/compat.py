"""The guard between a workspace's recorded embedding model and the server's embedder."""

from __future__ import annotations

from memplane.domain.models import Workspace
from memplane.errors import EmbeddingMismatchError
from memplane.server.embedding.base import Embedder


def ensure_compatible(workspace: Workspace, embedder: Embedder) -> None:
    """Raise `EmbeddingMismatchError` (FAILED_PRECONDITION) unless the embedder's model and
    dimension are the ones recorded on the workspace: mixing models would silently
    corrupt every similarity."""
    if (workspace.embedding_model, workspace.embedding_dimensions) != (embedder.model_id, embedder.dimensions):
        raise EmbeddingMismatchError(
            f"workspace {workspace.name!r} was created for embeddings of {workspace.embedding_model} "
            f"({workspace.embedding_dimensions}-d); this server embeds with {embedder.model_id} "
            f"({embedder.dimensions}-d)"
        )
