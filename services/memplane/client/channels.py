"""The SDK's channels: plaintext or TLS per target, with the SDK's retry service config.

A target is "host:port" (or any gRPC target name, e.g. "dns:///memplane:50051"),
"https://host:port" (TLS) or "http://host:port" (plaintext). A bare target uses TLS when
the client was given `tls=True`, a `root_certificates` bundle or a client certificate;
otherwise plaintext, the local default. TLS verifies the server's certificate against
*root_certificates* (PEM bytes), or the system's roots when None (gRPC's default bundle),
and the host name of the target against the certificate's names.

Reconnecting (gRPC core's connection backoff, grpc/doc/connection-backoff.md): each
channel keeps its connections in a subchannel pool of its own
(`grpc.use_local_subchannel_pool`). gRPC's default is one pool per process, shared by
every channel with the same target and options: a client made after a server restart
then inherited the subchannel of an older client, backoff and all, and was refused
("Connection refused", UNAVAILABLE) for seconds after the server was back
(grpc/grpc#17282, #21240). A channel that lived through an outage waits at most
RECONNECT_BACKOFF seconds (gRPC's default grows to 120 s; jitter ±20 %) between
connection attempts, so it is back about a second after the server is. The cost of the
own pool: two clients in one process no longer share one TCP connection.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from memplane.client.retry import service_config

_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
RECONNECT_BACKOFF = 1.0  # seconds between connection attempts to an unreachable server, at most
_SCHEMES = {"https://": True, "http://": False}


@dataclass(frozen=True)
class TlsOptions:
    """How the client speaks TLS: *enabled* for bare targets (None: when a CA or client
    certificate is given), the CA bundle that signs the server's certificate (PEM; None:
    the system's roots), and a (certificate chain, private key) PEM pair for mutual TLS."""

    enabled: bool | None = None
    root_certificates: bytes | None = None
    client_certificate: tuple[bytes, bytes] | None = None

    def for_bare_targets(self) -> bool:
        """Whether a target without a scheme uses TLS."""
        if self.enabled is not None:
            return self.enabled
        return self.root_certificates is not None or self.client_certificate is not None


def parse_target(target: str, tls: TlsOptions) -> tuple[str, bool]:
    """(gRPC target without the scheme, whether it uses TLS). Raises `ValueError` for
    an "http://" target when TLS was asked for explicitly (`tls=True`), or an empty one."""
    for scheme, secure in _SCHEMES.items():
        if target.startswith(scheme):
            address = target[len(scheme) :].rstrip("/")
            if not secure and tls.enabled:
                raise ValueError(f"target {target!r} is plaintext (http://) but tls=True")
            break
    else:
        address, secure = target, tls.for_bare_targets()
    if not address:
        raise ValueError(f"target {target!r} names no address")
    return address, secure


def open_channel(
    address: str, secure: bool, tls: TlsOptions, *, retry: bool, attempt_timeout: float | None = None
) -> grpc.aio.Channel:
    """A grpc.aio channel to *address*: TLS when *secure*, with idempotent calls retried
    unless *retry* is False, each attempt given at most *attempt_timeout* seconds
    (`memplane.client.retry`). Raises `ValueError` for a non-positive *attempt_timeout*."""
    options: list[tuple[str, str | int]] = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.enable_retries", int(retry)),
        # A subchannel pool of this channel's own: no backoff inherited from another client.
        ("grpc.use_local_subchannel_pool", 1),
        # The first wait and the longest one (gRPC's defaults: 1 s growing by 1.6x to 120 s).
        ("grpc.initial_reconnect_backoff_ms", int(RECONNECT_BACKOFF * 1000)),
        ("grpc.max_reconnect_backoff_ms", int(RECONNECT_BACKOFF * 1000)),
    ]
    if retry:
        options += [
            ("grpc.service_config", service_config(attempt_timeout)),
            # A request is kept for its retries only while it fits this buffer (gRPC's
            # default, 256 KiB, would leave a large AddMemories batch unretried).
            ("grpc.per_rpc_retry_buffer_size", _MAX_MESSAGE_BYTES),
        ]
        if attempt_timeout is not None:
            # gRPC core reads perAttemptRecvTimeout only with this channel argument set
            # (retry_service_config.cc); no hedging policy is configured.
            options.append(("grpc.experimental.enable_hedging", 1))
    if not secure:
        return grpc.aio.insecure_channel(address, options=options)
    chain, key = tls.client_certificate or (None, None)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.root_certificates, private_key=key, certificate_chain=chain
    )
    return grpc.aio.secure_channel(address, credentials, options=options)
