#!/usr/bin/env bash
# Install what a real node needs from Debian's packages, when missing (idempotent; ~65 s cold by shared/k8s-node's measure):
# containerd 1.6 + runc (the CRI runtime), the CNI plugins (bridge, host-local, portmap, loopback),
# iptables + conntrack (kube-proxy), ipset (kube-router's firewall), busybox-static (the test
# image), gcc + libc6-dev (the static `pause`).
# Needs root. containerd's package starts no daemon here (no systemd): node-up.sh runs its own.
set -euo pipefail
need=""
for p in containerd runc containernetworking-plugins iptables conntrack ipset busybox-static gcc libc6-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then echo "install-node-deps: missing$need (apt-get install them as root)" >&2; exit 1; fi
echo "install-node-deps: installing$need" >&2
apt-get update -q >&2
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >&2
