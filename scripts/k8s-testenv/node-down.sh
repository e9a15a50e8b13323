#!/usr/bin/env bash
# Stop what node-up.sh RUN_DIR started, by PID from RUN_DIR/pids, and undo its host changes:
# pods' sandboxes (CNI DEL), containerd tasks, mounts under RUN_DIR and the pods' netns, the
# iptables guard rule, kube-proxy's chains, kube-router's chains and ipsets, the bridge,
# ip_forward, the cgroup-v1 root; then its watchdog (node-up.sh KUBE_UP_WATCH_PID), if it is not us.
# Usage: node-down.sh RUN_DIR [--purge]   (--purge also deletes RUN_DIR)
set -uo pipefail
RUN=${1:?usage: node-down.sh RUN_DIR [--purge]}; RUN=$(cd "$RUN" && pwd) || exit 1
PIDS=$RUN/pids; SOCK=$RUN/containerd/containerd.sock
pid() { cat "$PIDS/$1.pid" 2>/dev/null; }
alive() { local p; p=$(pid "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
stop() {  # stop NAME...: TERM them all at once, wait up to 10 s, then KILL the rest
  local n p i t0=$SECONDS; local -a ps=()
  for n in "$@"; do
    p=$(pid "$n") || continue; [ -n "$p" ] || continue
    kill -TERM "$p" 2>/dev/null && ps+=("$p")
    rm -f "$PIDS/$n.pid"
  done
  for i in $(seq 1 100); do
    local any=0; for p in "${ps[@]}"; do kill -0 "$p" 2>/dev/null && any=1; done
    [ $any = 0 ] && break; sleep 0.1
  done
  for p in "${ps[@]}"; do kill -0 "$p" 2>/dev/null && { kill -KILL "$p" 2>/dev/null; echo "node-down: pid $p needed SIGKILL" >&2; }; done
  [ $((SECONDS - t0)) -gt 3 ] && echo "node-down: stopping $* took $((SECONDS - t0)) s" >&2
  return 0
}
# 1. kube-proxy first (its --cleanup removes its iptables chains), kubelet, control plane.
stop kube-proxy kubelet kube-scheduler kube-controller-manager
# 2. Pod sandboxes through CRI is what the kubelet would do; without crictl, tear down with ctr:
#    kill the tasks, then let containerd's CRI forget them; CNI DEL happens via the CRI plugin
#    only on RemovePodSandbox, so clean the netns/veths/ipam by hand below.
if alive containerd && [ -S "$SOCK" ]; then
  for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1
  done
  sleep 1
  for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1
  done
  for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1
  done
fi
stop containerd
# containerd-shim-runc-v2 processes started by our containerd (their -address is our socket).
# (pgrep -x cannot match names over 15 characters: walk /proc, kill only shims of OUR socket)
for d in /proc/[0-9]*; do
  c=$( { tr '\0' ' ' < "$d/cmdline"; } 2>/dev/null ) || continue
  case $c in *containerd-shim-runc-v2*"-address $SOCK "*) kill -KILL "${d#/proc/}" 2>/dev/null ;; esac
done
stop coredns kube-apiserver etcd
# kube-router's firewall: its jumps, chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) and ipsets
# (KUBE-SRC-*, KUBE-DST-*), by name (v2.1.0's --cleanup-config leaves them with iptables-nft, then
# panics in its IPVS part).
stop kube-router
if [ -f "$RUN/kube-router-bin" ]; then
  iptables-save -t filter | grep -E '^-A (INPUT|FORWARD|OUTPUT) .*-j KUBE-ROUTER-' | sed 's/^-A /-D /' |
    while read -r rule; do eval "iptables $rule" 2>/dev/null; done
  chains=$(iptables -S | awk '/^-N (KUBE-ROUTER-|KUBE-POD-FW-|KUBE-NWPLCY-)/ {print $2}')
  for c in $chains; do iptables -F "$c" 2>/dev/null; done
  for c in $chains; do iptables -X "$c" 2>/dev/null; done
  for set in $(ipset list -n 2>/dev/null | grep -E '^KUBE-(SRC|DST)-'); do ipset destroy "$set" 2>/dev/null; done
  rm -f "$RUN/kube-router-bin"
fi
# 3. Network: netns created during this run, veths on our bridge, the bridge, the guard rule.
if [ -f "$RUN/netns.before" ]; then
  for ns in $(ls /var/run/netns 2>/dev/null | sort | comm -13 "$RUN/netns.before" -); do
    case $ns in cni-*) ip netns delete "$ns" 2>/dev/null || { umount "/var/run/netns/$ns" 2>/dev/null; rm -f "/var/run/netns/$ns"; } ;; esac
  done
fi
if [ -f "$RUN/iptables-guard" ]; then
  # shellcheck disable=SC2046
  iptables -D $(cat "$RUN/iptables-guard") 2>/dev/null; rm -f "$RUN/iptables-guard"
fi
# kube-proxy leftovers (its chains are all KUBE-*; CNI portmap's are CNI-*), only if we ran it.
# NB: --cleanup removes every KUBE-* chain on the host, i.e. also those of another kube-proxy.
if [ -f "$RUN/kube-proxy-bin" ]; then
  "$(cat "$RUN/kube-proxy-bin")" --cleanup --config="$RUN/config/kube-proxy.yaml" > "$RUN/logs/kube-proxy-cleanup.log" 2>&1
  rm -f "$RUN/kube-proxy-bin"
fi
if [ -f "$RUN/created-kube-firewall" ]; then
  for ipt in $(cat "$RUN/created-kube-firewall"); do
    $ipt -D INPUT -j KUBE-FIREWALL 2>/dev/null; $ipt -D OUTPUT -j KUBE-FIREWALL 2>/dev/null
    $ipt -F KUBE-FIREWALL 2>/dev/null; $ipt -X KUBE-FIREWALL 2>/dev/null
  done
  rm -f "$RUN/created-kube-firewall"
fi
if [ -f "$RUN/created-bridge" ]; then
  br=$(cat "$RUN/created-bridge")
  for v in $(ip -o link show master "$br" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do ip link del "$v" 2>/dev/null; done
  ip link del "$br" 2>/dev/null; rm -f "$RUN/created-bridge"
fi
if [ -f "$RUN/ip_forward.before" ]; then cat "$RUN/ip_forward.before" > /proc/sys/net/ipv4/ip_forward; fi
# 4. Mounts under RUN (overlay rootfs, kubelet tmpfs volumes, shm), deepest first.
for _ in 1 2 3; do
  m=$(awk -v r="$RUN/" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r)
  [ -z "$m" ] && break
  for x in $m; do umount "$x" 2>/dev/null || umount -l "$x" 2>/dev/null; done
done
# Kubelet's legacy links to our pod logs; the fixed dirs node-up saw created.
for l in /var/log/containers/*.log; do
  [ -L "$l" ] && case $(readlink "$l") in "$RUN"/*) rm -f "$l" ;; esac
done
if [ -f "$RUN/created-dirs" ]; then
  while read -r d; do [ -d "$d" ] && find "$d" -depth -type d -empty -delete 2>/dev/null; done < "$RUN/created-dirs"
  rm -f "$RUN/created-dirs"
fi
# 5. cgroup v1 root (empty by now): remove leaf-first.
if [ -f "$RUN/cgroup-root" ]; then
  cg=$(cat "$RUN/cgroup-root")
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h${cg#/}" ] || continue
    find "$h${cg#/}" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
fi
left=$(awk -v r="$RUN/" 'index($2, r) == 1' /proc/self/mounts | wc -l)
[ "$left" = 0 ] || echo "node-down: $left mounts still under $RUN" >&2
WD=$(sed -n 's/^WATCHDOG_PID=//p' "$RUN/env" 2>/dev/null)
if [ -n "$WD" ] && [ "$WD" != $$ ]; then kill "$WD" 2>/dev/null; fi
if [ "${2:-}" = --purge ] && [ "$left" = 0 ]; then rm -rf "$RUN"; fi
echo "node-down: stopped"
