#!/usr/bin/env bash
# The whole test suite, as CI runs it: static checks, then pytest (unit, integration
# against a real embedded PostgreSQL, e2e over real gRPC on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# One command per line: under `set -e` a failure inside an `a && b` list would not stop the script.
echo "== ruff"
ruff check .
ruff format --check services tests bench scripts
echo "== mypy";          mypy
echo "== import-linter"; lint-imports
echo "== buf lint";      buf lint
echo "== generated code up to date"; python scripts/gen_proto.py --check
echo "== pytest";        python -m pytest -q "$@"
