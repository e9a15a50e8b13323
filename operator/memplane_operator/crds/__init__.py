"""The one source of memplane's CustomResourceDefinitions (group memplane.io, v1alpha1).

`scripts/gen_manifests.py` writes them to operator/config/crd/ (and the chart reuses
those files byte for byte); a test checks that the committed files are current. Schemas
are structural (every field typed, unknown fields pruned); the rules an OpenAPI schema
cannot say are CEL `x-kubernetes-validations`, checked by the API server itself, so a
bad object is refused at `kubectl apply` with the field named.

One module per kind (`memory_workspace`, `sandbox_class`), both written in the vocabulary
of `schema`.
"""

from __future__ import annotations

from typing import Any

from memplane_operator.crds.memory_workspace import memory_workspace_crd
from memplane_operator.crds.sandbox_class import DEFAULT_CLASS_ANNOTATION, sandbox_class_crd
from memplane_operator.crds.schema import API_VERSION, GROUP, VERSION

__all__ = ["API_VERSION", "DEFAULT_CLASS_ANNOTATION", "GROUP", "VERSION", "all_crds"]


def all_crds() -> dict[str, dict[str, Any]]:
    """File name under operator/config/crd/ -> CRD."""
    return {
        "memplane.io_memoryworkspaces.yaml": memory_workspace_crd(),
        "memplane.io_sandboxclasses.yaml": sandbox_class_crd(),
    }
