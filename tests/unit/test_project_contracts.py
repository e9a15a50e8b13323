"""Checks on the repository itself: generated code is fresh, the proto is buf-lint
clean, and the layer contracts of STYLE.md hold (import-linter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603 - fixed tools, no outside input


def test_generated_protobuf_code_matches_the_proto_files() -> None:
    result = _run(sys.executable, "scripts/gen_proto.py", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_proto_is_buf_lint_clean() -> None:
    buf = Path(sys.executable).with_name("buf")
    result = _run(str(buf), "lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = _run(str(lint_imports), "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
