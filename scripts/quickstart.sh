#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone:
#   1. install (scripts/setup.sh),
#   2. start `memplane serve` (embedded PostgreSQL 18 + pgvector under $MEMPLANE_DATA_DIR,
#      default ~/.local/share/memplane; first run creates workspace "default" and keys),
#   3. import LoCoMo through the gRPC API, one workspace per conversation,
#   4. answer a search, replay a conversation through CompactionService, then stop the server.
# LOCOMO=path/to/locomo10.json (default: ../shared/data/locomo/locomo10.json)
# CONVERSATIONS=N imports only the first N conversations (default: all 10, ~3 min).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
LOCOMO=${LOCOMO:-../shared/data/locomo/locomo10.json}
PORT=${MEMPLANE_GRPC__PORT:-50051}
if [ ! -f "$LOCOMO" ]; then
  echo "LoCoMo not found at $LOCOMO: pass LOCOMO=/path/to/locomo10.json" >&2
  exit 2
fi
LOG=$(mktemp -t memplane-serve.XXXXXX.log)

memplane serve >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 120); do
  if grep -q "memplane listening on" "$LOG"; then break; fi
  if ! kill -0 $SERVER 2>/dev/null; then cat "$LOG"; echo "server failed to start" >&2; exit 1; fi
  sleep 0.5
done
grep "memplane listening on" "$LOG"

memplane import locomo "$LOCOMO" ${CONVERSATIONS:+--conversations "$CONVERSATIONS"}

echo
echo "\$ memplane key create locomo-conv-26   # a key for the first conversation's workspace"
CREATED=$(memplane key create locomo-conv-26 --display-name quickstart)
KEY=$(printf '%s\n' "$CREATED" | sed -n 's/^API key (shown once): //p')
KEY_ID=$(printf '%s\n' "$CREATED" | sed -n 's/^key id //p')
echo "\$ memplane search 'When did Caroline go to the LGBTQ support group?' --api-key ..."
memplane search "When did Caroline go to the LGBTQ support group?" --api-key "$KEY"
memplane key revoke "$KEY_ID" >/dev/null

echo
echo "\$ memplane add 'I switched from coffee to green tea last spring' --user-id me   # workspace 'default'"
memplane add "I switched from coffee to green tea last spring" --user-id me
echo "\$ memplane search 'what does the user drink?' --user-id me"
memplane search "what does the user drink?" --user-id me

echo
echo "\$ memplane compact locomo \"$LOCOMO\" --sessions 8 --max-input-tokens 4000   # CompactionService"
memplane compact locomo "$LOCOMO" --sessions 8 --max-input-tokens 4000
