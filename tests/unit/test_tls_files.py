"""The listener's PEM files as `ReloadingCertificates` reads them: a pair is loaded only
when the certificate parses and the key is the certificate's own; anything else keeps the
last good pair (with a warning) or, at start, is a one-line error naming the file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memplane.errors import FailedPreconditionError
from memplane.server.api.tls import ReloadingCertificates, TlsFiles
from tests.fix_tls import TestCA


def _files(tmp_path: Path) -> TlsFiles:
    return TlsFiles(tmp_path / "tls.crt", tmp_path / "tls.key")


@pytest.mark.parametrize("damage", ["truncated certificate", "another pair's key", "garbage key"])
def test_a_bad_pair_is_not_loaded_and_a_warning_names_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    files = _files(tmp_path)
    ca = TestCA("reload CA")
    ca.issue("memplane").write(files.cert_file, files.key_file)
    certificates = ReloadingCertificates(files)
    assert certificates.fetch() is None  # unchanged files: nothing to load
    good = files.cert_file.read_bytes()
    if damage == "truncated certificate":
        files.cert_file.write_bytes(good[:300])
    elif damage == "another pair's key":
        files.key_file.write_bytes(ca.issue("someone else").key)
    else:
        files.key_file.write_bytes(b"-----BEGIN PRIVATE KEY-----\nbm9uc2Vuc2U=\n-----END PRIVATE KEY-----\n")
    caplog.set_level(logging.INFO, logger="memplane.server.api.tls")
    assert certificates.fetch() is None, f"a pair with a {damage} was handed to gRPC"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keeping the current certificate" in warnings[0]
    assert ("grpc.tls_cert_file" if damage == "truncated certificate" else "grpc.tls_key_file") in warnings[0]
    assert not [r for r in caplog.records if "changed" in r.getMessage()]

    ca.issue("memplane").write(files.cert_file, files.key_file)  # whole again: loaded
    assert certificates.fetch() is not None


def test_a_bad_pair_at_start_is_one_error_naming_the_file(tmp_path: Path) -> None:
    files = _files(tmp_path)
    ca = TestCA("start CA")
    ca.issue("memplane").write(files.cert_file, files.key_file)
    files.key_file.write_bytes(ca.issue("someone else").key)
    with pytest.raises(FailedPreconditionError, match=r"grpc\.tls_key_file .*tls\.key.* does not match"):
        ReloadingCertificates(files)
    files.cert_file.write_bytes(b"not a certificate")
    with pytest.raises(FailedPreconditionError, match=r"grpc\.tls_cert_file"):
        ReloadingCertificates(files)


def test_a_client_ca_file_must_hold_certificates(tmp_path: Path) -> None:
    files = TlsFiles(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "clients.pem")
    TestCA("server CA").issue("memplane").write(files.cert_file, files.key_file)
    files.client_ca_file.write_bytes(b"-----BEGIN CERTIFICATE-----\nbm9uc2Vuc2U=\n-----END CERTIFICATE-----\n")  # type: ignore[union-attr]
    with pytest.raises(FailedPreconditionError, match=r"grpc\.tls_client_ca_file"):
        ReloadingCertificates(files)
