#!/usr/bin/env bash
# The whole test suite, as CI runs it: static checks, then pytest (unit, integration
# against a real embedded PostgreSQL, e2e over real gRPC on loopback, and the operator and
# chart against a real kube-apiserver + etcd + kube-controller-manager, and the chart installed
# on a real one-node cluster whose Pods run: tests/e2e/cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# One command per line: under `set -e` a failure inside an `a && b` list would not stop the script.
echo "== ruff"
ruff check .
ruff format --check services operator tests bench scripts
echo "== mypy";          mypy
echo "== import-linter"; lint-imports
echo "== buf lint";      buf lint
echo "== generated code up to date"; python scripts/gen_proto.py --check
echo "== generated manifests up to date"; python scripts/gen_manifests.py --check
echo "== generated docs up to date"; python scripts/gen_docs.py --check
echo "== docs site"; NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet
# kube-apiserver, etcd, kubectl, kube-controller-manager and helm, built from the Go module
# proxy (~12 min cold on 2 cores, cached under ~/.cache/k8s-testenv; instant once built).
echo "== k8s toolchain"
MEMPLANE_K8S_BIN=$(bash scripts/k8s-testenv/build-toolchain.sh | tail -n 1)
export MEMPLANE_K8S_BIN
# A real node beside it: containerd, runc, CNI plugins from Debian (installed when missing);
# kubelet, kube-scheduler, kube-proxy, CoreDNS and kube-network-policies from the Go module proxy
# (~6-8 CPU-min cold after the toolchain, sharing its caches; instant once built).
echo "== k8s node"
bash scripts/k8s-testenv/install-node-deps.sh
MEMPLANE_K8S_NODE_BIN=$(bash scripts/k8s-testenv/build-node.sh | tail -n 1)
export MEMPLANE_K8S_NODE_BIN
# The container image (Podman, a debootstrap base; layers cached: ~30 s after the first build).
echo "== container image"
export MEMPLANE_IMAGE=localhost/memplane:test
mkdir -p build
if ! IMAGE=$MEMPLANE_IMAGE bash scripts/image/build.sh > build/image.log 2>&1; then
  tail -n 40 build/image.log; echo "image build failed (whole log: build/image.log)"; exit 1
fi
tail -n 1 build/image.log
# Debian's Chromium for the console's browser tests (tests/e2e/console), installed when
# missing; Playwright (the dev extra) drives it, no browser is downloaded.
echo "== browser"
bash scripts/install-browser-deps.sh
echo "== pytest";        python -m pytest -q "$@"
