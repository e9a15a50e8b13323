#!/usr/bin/env bash
# Build the Kubernetes NODE binaries from the Go module proxy only (no release tarballs), beside
# build-toolchain.sh's control plane and in the same caches: kubelet, kube-scheduler, kube-proxy
# (k8s.io/kubernetes, the same wrapper-module approach: `go install k8s.io/kubernetes/cmd/kubelet@…`
# fails, "contains one or more replace directives"), CoreDNS (cluster DNS) and kube-router
# (NetworkPolicy enforcement only: its firewall, iptables + ipset, beside the bridge CNI).
#
# Result: $K8S_TOOLS_CACHE/node-<stamp>/ with the five binaries and a `.complete` stamp, printed on
# the LAST line of stdout (progress on stderr). With the stamp present this returns at once. Cold:
# 185-196 s wall on 2 cores after build-toolchain.sh (measured 2026-12-06: they share its build cache;
# CoreDNS and kube-router take most of it). Concurrent callers are serialised by its lock.
# Env: K8S_VERSION (1.35.4)  COREDNS_VERSION (1.14.7)  KUBE_ROUTER_VERSION (2.1.0)
#      K8S_TOOLS_CACHE (~/.cache/k8s-testenv)  NICE_LEVEL (0)
# Needs go >= 1.26 on PATH, python3. GOTOOLCHAIN=local, CGO_ENABLED=0 (static binaries).
set -euo pipefail
exec 3>&1 1>&2
K=${K8S_VERSION:-1.35.4}; CV=${COREDNS_VERSION:-1.14.7}; RV=${KUBE_ROUTER_VERSION:-2.1.0}
CACHE=${K8S_TOOLS_CACHE:-$HOME/.cache/k8s-testenv}
OUT=$CACHE/node-k$K-c$CV-r$RV
if [ -f "$OUT/.complete" ]; then echo "$OUT" >&3; exit 0; fi
command -v go >/dev/null || { echo "build-node: 'go' not on PATH (need go >= 1.26)" >&2; exit 1; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
echo "build-node: waiting for $CACHE/.build.lock" >&2
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT" >&3; exit 0; fi
echo "build-node: building into $OUT" >&2
export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gobuild GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
mkdir -p "$OUT" "$CACHE/src"
NICE="nice -n ${NICE_LEVEL:-0}"
t0=$(date +%s)

# --- kubelet, kube-scheduler, kube-proxy: build-toolchain.sh's wrapper module, for the node ---------
# shellcheck source=k8s-wrapper.sh
. "$(dirname "$0")/k8s-wrapper.sh"
k8s_wrapper "$CACHE/src/k8s-node-$K" example.local/k8s-node kubelet kube-scheduler kube-proxy
k8s_build "$CACHE/src/k8s-node-$K" "$OUT" kubelet kube-scheduler kube-proxy
CMDS="kubelet kube-scheduler kube-proxy"

# --- CoreDNS: no replace directives, a plain go install ----------------------------------------------
t=$(date +%s); GOFLAGS= GOBIN="$OUT" $NICE go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v$CV"
echo "build-node: built coredns in $(( $(date +%s)-t ))s" >&2

# --- kube-router, firewall only (NetworkPolicy by iptables + ipset beside the bridge CNI) -------------
# v2.1.0 is the one version the module proxy serves; its golang.org/x dependencies carry published
# CVEs, so the wrapper module takes their current releases (as distributions patching it do).
# (kube-network-policies, kind's agent, needs the nftables `queue` expression: CONFIG_NFT_QUEUE,
# which this machine's kernel lacks - "netlink receive: no such file or directory".)
RW=$CACHE/src/kube-router-$RV; mkdir -p "$RW"
printf 'module example.local/kube-router\n\ngo 1.26.0\n' > "$RW/go.mod"
t=$(date +%s)
(cd "$RW" && go get "github.com/cloudnativelabs/kube-router/v2@v$RV" \
   golang.org/x/net@latest golang.org/x/crypto@latest golang.org/x/sys@latest golang.org/x/text@latest \
   golang.org/x/oauth2@latest \
 && $NICE go build -trimpath -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$RV" \
      -o "$OUT/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
echo "build-node: built kube-router in $(( $(date +%s)-t ))s" >&2

# --- check what was built, then stamp ----------------------------------------------------------------
for c in $CMDS; do
  v=$("$OUT/$c" --version 2>&1) || { echo "$c --version failed: $v" >&2; exit 1; }
  grep -qE "^Kubernetes v$K\$" <<<"$v" || { echo "$c version mismatch: $v" >&2; exit 1; }
done
v=$("$OUT/coredns" -version 2>&1); grep -q "CoreDNS-$CV" <<<"$v" || { echo "coredns version mismatch: $v" >&2; exit 1; }
v=$("$OUT/kube-router" --version 2>&1 || true); grep -q "v$RV" <<<"$v" || { echo "kube-router version mismatch: $v" >&2; exit 1; }
echo "build-node: total $(( $(date +%s)-t0 ))s" >&2
touch "$OUT/.complete"
echo "$OUT" >&3
