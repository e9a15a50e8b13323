"""SandboxClass type `e2b`: an E2B cloud sandbox per workspace through the `e2b` SDK
(`memplane.sandbox.e2b.E2BSandboxes`).

Parameters (``spec.e2b``): ``template`` (the E2B template sandboxes are made from),
``apiKeySecretRef`` (``name`` and ``key`` of a Secret in the operator's own namespace,
`OperatorSettings.own_namespace`: a tenant never sees the key) and ``domain`` (E2B's
domain, default the SDK's: ``E2B_DOMAIN`` or e2b.app). The key is read from the Secret on
every pass and handed to the SDK in memory only (a rotated key is used at the next pass);
the SDK's own environment variables of the operator's process (``E2B_API_URL``,
``E2B_SANDBOX_URL``, ``E2B_DEBUG``, ``E2B_HTTP_VERSION``) still apply, as they do to any
program using the SDK. Sandboxes carry the metadata ``memplane.workspace`` (the
tenantId), ``memplane.io/sandbox-class`` and ``memplane.io/namespace``, and are found by
them: two classes never take each other's sandbox, and an ensure after a crash finds the
sandbox made before it. Suspend pauses (files kept), destroy kills.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from e2b import AuthenticationException, RateLimitException, SandboxException
from e2b.exceptions import ServiceBusyException

from memplane.sandbox.e2b import E2BSandboxes
from memplane.sandbox.errors import SandboxNotFoundError
from memplane_operator.backends.base import (
    CLASS_LABEL,
    BackendRefusedError,
    BackendUnavailableError,
    ErrorTable,
    InvalidParametersError,
    OpenBackend,
    Reading,
    Target,
    nothing_to_close,
    start_by_ensure,
)
from memplane_operator.kube import Secret

TYPE = "e2b"
SHARED = False  # opened per pass: the Secret is read each time (a rotated key is used at once)
CLASS_METADATA = CLASS_LABEL  # the same key as the docker and pod objects' label
NAMESPACE_METADATA = "memplane.io/namespace"
_TEMPLATE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,254}$")
_HOST_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"^{_HOST_LABEL}(\.{_HOST_LABEL})*(:[0-9]{{1,5}})?$")
_KEY_FIELD = "spec.e2b.apiKeySecretRef"


@dataclass(frozen=True)
class E2BParams:
    """The parameters of an e2b SandboxClass (the key's Secret by reference only)."""

    class_name: str
    template: str
    secret_name: str
    secret_key: str
    domain: str | None = None


def parse(class_name: str, spec: Mapping[str, Any]) -> E2BParams:
    """The parameters of SandboxClass *class_name* (its *spec*). Raises
    `InvalidParametersError` naming the field (``spec.e2b.template`` ...)."""
    e2b = spec.get("e2b") or {}
    template = str(e2b.get("template") or "")
    if not _TEMPLATE.match(template):
        raise InvalidParametersError("spec.e2b.template", f"{template!r} is not an E2B template name or id")
    domain = str(e2b.get("domain") or "") or None
    if domain is not None and not _DOMAIN.match(domain):
        raise InvalidParametersError("spec.e2b.domain", f"{domain!r} is not a domain name (e2b.app)")
    ref = e2b.get("apiKeySecretRef") or {}
    name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
    if not name or not key:
        raise InvalidParametersError(_KEY_FIELD, "needs the name and key of a Secret")
    return E2BParams(class_name=class_name, template=template, secret_name=name, secret_key=key, domain=domain)


async def read_api_key(params: E2BParams, target: Target) -> str:
    """The API key from the Secret *params* names, in the operator's own namespace.
    Raises `InvalidParametersError` (spec.e2b.apiKeySecretRef) when there is no such
    Secret or key, or it is empty."""
    where = f"Secret {target.own_namespace or '?'}/{params.secret_name}"
    if not target.own_namespace:
        raise InvalidParametersError(
            _KEY_FIELD, f"{where}: the operator's namespace is unknown (set MEMPLANE_OPERATOR_OWN_NAMESPACE)"
        )
    secret = await target.kube.read(Secret, params.secret_name, target.own_namespace)
    if secret is None:
        raise InvalidParametersError(_KEY_FIELD, f"{where} does not exist")
    encoded = (secret.get("data") or {}).get(params.secret_key)
    if encoded is None:
        raise InvalidParametersError(_KEY_FIELD, f"{where} has no key {params.secret_key!r}")
    try:
        key = base64.b64decode(encoded, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        key = ""
    if not key:
        raise InvalidParametersError(_KEY_FIELD, f"{where} key {params.secret_key!r} holds no API key")
    return key


async def open_backend(params: E2BParams, target: Target) -> OpenBackend:
    """An `E2BSandboxes` for *params* with the key read now from its Secret (nothing of
    its own to close)."""
    backend = E2BSandboxes(
        template=params.template,
        metadata={CLASS_METADATA: params.class_name, NAMESPACE_METADATA: target.namespace},
        api_key=await read_api_key(params, target),
        domain=params.domain,
    )
    return OpenBackend(backend=backend, close=nothing_to_close)


start = start_by_ensure  # the sandbox found and connected (a paused one resumed), or created


async def ref_by_name(backend: E2BSandboxes, params: E2BParams, workspace: str) -> str | None:
    """The id of the workspace's sandbox of this class, found by its metadata; None if none."""
    found = await backend.find(workspace)
    return None if found is None else found.ref


ERRORS = ErrorTable(
    service="E2B",
    api_error=SandboxException,
    status_of=lambda e: e.status_code,
    transport=(httpx.TransportError, OSError),
    first=(
        Reading(AuthenticationException, BackendRefusedError, "E2B rejected the API key: "),
        Reading((RateLimitException, ServiceBusyException), BackendUnavailableError, "E2B is busy: "),
        Reading(SandboxNotFoundError, BackendUnavailableError, "the sandbox is gone; it is made again: "),
    ),
)


def classify(error: BaseException) -> Exception | None:
    """`ERRORS` (`ErrorTable`): a rejected key or a 4xx (a template E2B does not have) ->
    `BackendRefusedError`; no connection, a timeout, a rate limit, E2B busy or a 5xx ->
    `BackendUnavailableError`; anything else -> None. A sandbox killed behind the
    operator's back (connect: 404) is not an error of the class: it is made again at the
    next ensure."""
    return ERRORS.classify(error)
