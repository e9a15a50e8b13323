"""TLS for the listener, reloaded from disk without a restart.

grpcio's library way (`grpc.dynamic_ssl_server_credentials`): gRPC core calls a
certificate-configuration fetcher before the handshake of every new connection; it
returns a new configuration or None (keep the current one). `ReloadingCertificates`
re-reads the PEM files each time (a few KB: cheaper than the handshake it precedes, and
immune to the coarse or unchanged mtimes of a file replaced in place or of a Kubernetes
Secret volume's symlink swap) and hands gRPC a new configuration only when the bytes
changed. Established connections keep the certificate they were opened with.

A half-replaced pair (a certificate whose key is not there yet, an unreadable or empty
file) is not loaded: the server keeps the last good pair and logs a warning once per
distinct bad state, and the next connection after the pair is whole loads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from memplane.errors import FailedPreconditionError
from memplane.server.settings import GrpcSettings

_log = logging.getLogger(__name__)

_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class TlsFiles:
    """Where the listener's PEM files are: certificate chain, private key, and the client
    CA bundle for mutual TLS (None: clients are not asked for a certificate)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    @classmethod
    def from_settings(cls, grpc_settings: GrpcSettings) -> TlsFiles | None:
        """The files of `grpc.tls_*`, or None when TLS is off (no certificate set)."""
        if grpc_settings.tls_cert_file is None or grpc_settings.tls_key_file is None:
            return None
        return cls(grpc_settings.tls_cert_file, grpc_settings.tls_key_file, grpc_settings.tls_client_ca_file)


_Pem = tuple[bytes, bytes, bytes | None]  # certificate chain, key, client CA


class ReloadingCertificates:
    """The state behind a `dynamic_ssl_server_credentials` fetcher: the PEM bytes last
    handed to gRPC.

    Raises `FailedPreconditionError` (from the constructor) naming the file when the
    initial files are missing or unreadable, do not parse, or the key is not the
    certificate's: a server must not start without a usable certificate.
    """

    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        loaded = self._read()
        if isinstance(loaded, str):
            raise FailedPreconditionError(f"TLS: {loaded}")
        self._current: _Pem = loaded
        self._last_problem = ""

    def _read(self) -> _Pem | str:
        """The files' bytes, or a sentence saying which one is not usable: unreadable, not
        PEM certificates (chain, client CA) or a PEM private key, or a key that is not the
        one of the chain's first certificate (checked with `cryptography`, so a bad pair
        never reaches gRPC, which would refuse it only in its own C log)."""
        paths = [("grpc.tls_cert_file", self._files.cert_file), ("grpc.tls_key_file", self._files.key_file)]
        if self._files.client_ca_file is not None:
            paths.append(("grpc.tls_client_ca_file", self._files.client_ca_file))
        contents: list[bytes] = []
        for setting, path in paths:
            try:
                contents.append(path.read_bytes())
            except OSError as exc:
                return f"{setting} {path} cannot be read: {exc.strerror or exc}"
        problem = _check_pair(contents[0], contents[1], self._files)
        if problem is None and len(contents) > 2:
            problem = _check_certificates(contents[2], "grpc.tls_client_ca_file", self._files.client_ca_file)
        if problem is not None:
            return problem
        return contents[0], contents[1], contents[2] if len(contents) > 2 else None

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        """The configuration of the PEM bytes loaded last."""
        cert, key, client_ca = self._current
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration when the files changed and are usable,
        else None (keep serving the current one). Never raises: an exception here would
        fail the client's handshake for the server's own file trouble."""
        loaded = self._read()
        if isinstance(loaded, str):
            if loaded != self._last_problem:
                _log.warning("TLS: keeping the current certificate: %s", loaded)
                self._last_problem = loaded
            return None
        self._last_problem = ""
        if loaded == self._current:
            return None
        self._current = loaded
        _log.info("TLS: certificate files changed; new connections use the new ones")
        return self.configuration()

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that call `fetch` before every new connection's handshake;
        client certificates required exactly when a client CA is configured."""
        return grpc.dynamic_ssl_server_credentials(
            self.configuration(),
            self.fetch,  # type: ignore[arg-type]  # grpc-stubs omit the None that grpc documents
            require_client_authentication=self._files.client_ca_file is not None,
        )


def _check_certificates(pem: bytes, setting: str, path: Path | None) -> str | None:
    """None if *pem* holds at least one certificate, else a sentence naming the file."""
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        return f"{setting} {path} holds no usable PEM certificate ({exc})"
    return None


def _check_pair(cert: bytes, key: bytes, files: TlsFiles) -> str | None:
    """None if *key* is the private key of the first certificate of chain *cert*, else a
    sentence naming the file at fault."""
    try:
        leaf = x509.load_pem_x509_certificates(cert)[0]
    except ValueError as exc:
        return f"grpc.tls_cert_file {files.cert_file} holds no usable PEM certificate ({exc})"
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:  # TypeError: an encrypted key (no password is given)
        return f"grpc.tls_key_file {files.key_file} holds no usable unencrypted PEM private key ({exc})"
    if private.public_key().public_bytes(*_SPKI) != leaf.public_key().public_bytes(*_SPKI):
        return f"grpc.tls_key_file {files.key_file} does not match the certificate in {files.cert_file}"
    return None
