#!/usr/bin/env bash
# Stop what kube-up.sh started, by the PIDs in RUN_DIR/env, and remove etcd's data. Usage: kube-down.sh RUN_DIR
# SIGTERM to the controller-manager and apiserver, then etcd once they are gone; each gets up to 15 s to exit
# (polled every 50 ms, no fixed sleep) before SIGKILL. A PID is only signalled while its command line still
# names the binary kube-up.sh started (PID reuse). Idempotent; exits 0 unless RUN_DIR/env is missing.
set -uo pipefail
RUN=${1:?usage: kube-down.sh RUN_DIR}
[ -f "$RUN/env" ] || { echo "kube-down: $RUN/env not found" >&2; exit 1; }
ETCD_PID=; API_PID=; KCM_PID=; WATCHDOG_PID=; ETCD_DATA=
# shellcheck disable=SC1091
. "$RUN/env"

alive() {  # PID: running (a zombie, exited but not yet reaped by its new parent, counts as gone)
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
  [ -r "/proc/$1/stat" ] || return 0
  [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]
}
ours() {  # PID REGEX: alive and its command line still matches (guards against PID reuse)
  alive "$1" || return 1
  [ -r "/proc/$1/cmdline" ] || return 0
  tr '\0' ' ' < "/proc/$1/cmdline" | grep -Eq -- "$2"
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
LEFT=()
gone_within() {  # MS PID...: 0 once all have exited, 1 (survivors in LEFT) after MS milliseconds
  local deadline=$(( $(now_ms) + $1 )); shift; local pids=("$@") p
  while :; do
    LEFT=()
    for p in "${pids[@]}"; do alive "$p" && LEFT+=("$p"); done
    [ ${#LEFT[@]} -eq 0 ] && return 0
    [ "$(now_ms)" -ge "$deadline" ] && return 1
    pids=("${LEFT[@]}"); sleep 0.05
  done
}
stop() {  # NAME PID...: SIGTERM, wait up to 15 s, then SIGKILL and wait up to 5 s more
  local name=$1; shift; local live=() p
  for p in "$@"; do ours "$p" "$name" && kill -TERM "$p" 2>/dev/null && live+=("$p"); done
  [ ${#live[@]} -gt 0 ] || return 0
  gone_within 15000 "${live[@]}" && return 0
  echo "kube-down: SIGKILL to ${LEFT[*]} ($name did not exit within 15s of SIGTERM)" >&2
  kill -KILL "${LEFT[@]}" 2>/dev/null
  gone_within 5000 "${LEFT[@]}" || echo "kube-down: ${LEFT[*]} still alive after SIGKILL" >&2
}
[ -n "$WATCHDOG_PID" ] && [ "$WATCHDOG_PID" != "$$" ] && kill "$WATCHDOG_PID" 2>/dev/null
stop "/kube-(controller-manager|apiserver) " "$KCM_PID" "$API_PID"
stop "/etcd " "$ETCD_PID"
case $ETCD_DATA in */etcd.??????) rm -rf "$ETCD_DATA" ;; esac
exit 0
