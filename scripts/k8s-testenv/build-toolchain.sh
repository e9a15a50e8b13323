#!/usr/bin/env bash
# Build the Kubernetes test toolchain from the Go module proxy only (no release tarballs):
# kube-apiserver, kubectl, kube-controller-manager, etcd and helm v3.
#
# Result: $K8S_TOOLS_CACHE/bin-<stamp>/ with the five binaries and a `.complete` stamp; the
# directory is printed on the LAST line of stdout, everything else goes to stderr. With the
# stamp present this returns at once; a cold build takes ~12-15 min on 2 cores (peak RAM
# ~1.9 GiB in the linker, ~5 GiB of module + build cache, 330 MiB of binaries).
# Exits non-zero on any failure (the stamp is only written after all binaries check out).
# Concurrent callers (pytest-xdist workers, two CI jobs) are serialised by a lock file.
#
# Env: K8S_VERSION (1.35.4)  ETCD_VERSION (3.6.16)  HELM_VERSION (3.22.0)
#      K8S_TOOLS_CACHE (~/.cache/k8s-testenv)
#      WITH_KCM (1): kube-controller-manager too (ownerReference GC, namespace deletion,
#                    `default` ServiceAccounts); WITH_KCM=0 skips it (stamp without -kcm).
#      NICE_LEVEL (0): nice level of the go commands.
# Needs go >= 1.26 (etcd 3.6.16's and helm 3.22's go.mod), python3; GOTOOLCHAIN=local, CGO_ENABLED=0.
# Why wrappers: `go install k8s.io/kubernetes/cmd/kube-apiserver@…` and `go install go.etcd.io/etcd/server/v3@…`
# both fail ("contains one or more replace directives").
set -euo pipefail
exec 3>&1 1>&2  # fd 3 = real stdout (only the result line); all progress to stderr

K=${K8S_VERSION:-1.35.4}; E=${ETCD_VERSION:-3.6.16}; H=${HELM_VERSION:-3.22.0}
CACHE=${K8S_TOOLS_CACHE:-$HOME/.cache/k8s-testenv}
case ${WITH_KCM-1} in ""|0|no|false) KCM="" ;; *) KCM=1 ;; esac
STAMP="k$K-e$E-h$H${KCM:+-kcm}"; OUT=$CACHE/bin-$STAMP
if [ -f "$OUT/.complete" ]; then echo "$OUT" >&3; exit 0; fi

command -v go >/dev/null || { echo "build-toolchain: 'go' not on PATH (need go >= 1.26)" >&2; exit 1; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
echo "build-toolchain: waiting for $CACHE/.build.lock" >&2
flock 9
if [ -f "$OUT/.complete" ]; then echo "$OUT" >&3; exit 0; fi  # another caller built it meanwhile
echo "build-toolchain: building $STAMP into $OUT (cold: ~15 min)" >&2

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gobuild GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
mkdir -p "$OUT" "$CACHE/src"
NICE="nice -n ${NICE_LEVEL:-0}"

# --- kubernetes: a wrapper module pinning every staging module the tag replaces ------------------
# shellcheck source=k8s-wrapper.sh
. "$(dirname "$0")/k8s-wrapper.sh"
CMDS="kube-apiserver kubectl${KCM:+ kube-controller-manager}"
# shellcheck disable=SC2086  # CMDS is a list of words
k8s_wrapper "$CACHE/src/k8s-$K" example.local/k8s-tools $CMDS
# shellcheck disable=SC2086
k8s_build "$CACHE/src/k8s-$K" "$OUT" $CMDS

# --- etcd: a wrapper main around server/v3's etcdmain (its own replace lines are ignored as a dependency) ---
EW=$CACHE/src/etcd-$E; mkdir -p "$EW"
# NB: a wrapper without a .go file importing etcd gets its require dropped by `go mod tidy`, and `go build`
# then silently resolves the *latest* server/v3. Hence a real main.go (what server/v3's own main.go does).
printf 'module example.local/etcd-tools\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$E" > "$EW/go.mod"
printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > "$EW/main.go"
t=$(date +%s)
(cd "$EW" && $NICE go mod tidy && $NICE go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" .)
echo "built etcd in $(( $(date +%s)-t ))s" >&2

# --- helm v3: no replace directives, plain go install; tell it which Kubernetes minor it targets ---------
# (else helm assumes 1.20 and a chart's `kubeVersion: ">=1.29.0-0"` fails)
HMOD=$(go mod download -json "helm.sh/helm/v3@v$H" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
HK=$(awk '$1=="k8s.io/client-go"{print $2; exit}' "$HMOD" | cut -d. -f2)   # v0.35.0 -> 35
HLD="-s -w -X helm.sh/helm/v3/internal/version.version=v$H -X helm.sh/helm/v3/internal/version.metadata="
for p in pkg/lint/rules pkg/chartutil; do HLD="$HLD -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$HK"; done
t=$(date +%s); GOFLAGS= GOBIN="$OUT" $NICE go install -trimpath -ldflags "$HLD" "helm.sh/helm/v3/cmd/helm@v$H"
echo "built helm in $(( $(date +%s)-t ))s" >&2

# --- check what was built, then stamp -----------------------------------------------------------------
# Each version is captured before it is matched: `cmd | grep -q` under pipefail fails when grep
# exits at its first match while cmd still writes (SIGPIPE) — etcd prints several lines.
version_is() { local out; out=$("$@" 2>&1) || return 1; grep -qE -- "$VERSION_RE" <<<"$out"; }
VERSION_RE="^Kubernetes v$K\$" version_is "$OUT/kube-apiserver" --version || { echo "kube-apiserver version mismatch" >&2; exit 1; }
VERSION_RE="etcd Version: $E\$" version_is "$OUT/etcd" --version \
  || { echo "etcd version mismatch: $("$OUT/etcd" --version 2>&1 | sed -n 1p)" >&2; exit 1; }
VERSION_RE="^v$H" version_is "$OUT/helm" version --short || { echo "helm version mismatch" >&2; exit 1; }
if [ -n "$KCM" ]; then VERSION_RE="^Kubernetes v$K\$" version_is "$OUT/kube-controller-manager" --version \
  || { echo "kube-controller-manager version mismatch" >&2; exit 1; }; fi
"$OUT/kubectl" version --client=true >&2
touch "$OUT/.complete"
echo "$OUT" >&3
