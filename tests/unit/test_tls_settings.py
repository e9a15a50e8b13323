"""TLS settings come as a pair: a certificate without its key (or a client CA without
either) is refused when the settings are read, naming the settings to set."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from memplane.server.settings import GrpcSettings


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"tls_cert_file": Path("tls.crt")}, "tls_key_file"),
        ({"tls_key_file": Path("tls.key")}, "tls_cert_file"),
        ({"tls_client_ca_file": Path("ca.pem")}, "tls_cert_file"),
    ],
)
def test_a_half_configured_tls_is_refused_naming_the_settings(given: dict[str, Path], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        GrpcSettings(**given)  # type: ignore[arg-type]


def test_tls_is_off_by_default() -> None:
    settings = GrpcSettings()
    assert settings.tls_cert_file is None
    assert settings.tls_key_file is None
    assert settings.tls_client_ca_file is None
