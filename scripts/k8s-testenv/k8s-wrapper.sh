# Sourced by build-toolchain.sh and build-node.sh: Kubernetes commands built from the Go module
# proxy. `go install k8s.io/kubernetes/cmd/X@vK` fails ("contains one or more replace
# directives"), so a wrapper module requires k8s.io/kubernetes vK, pins every staging module its
# go.mod replaces to the matching v0.<minor> release, and holds each command's main package.
# Needs K (e.g. 1.35.4), NICE (a command prefix, e.g. "nice -n 0"), GOMODCACHE/GOCACHE set.

# k8s_wrapper DIR MODULE CMD...: write the wrapper module MODULE in DIR (go.mod, cmd/<CMD>/main.go), tidy it.
k8s_wrapper() {
  local w=$1 module=$2 c f kdir kmod; shift 2
  mkdir -p "$w"
  go mod download -json "k8s.io/kubernetes@v$K" > "$w/dl.json"
  kdir=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["Dir"])' "$w/dl.json")
  kmod=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["GoMod"])' "$w/dl.json")
  {
    echo "module $module"; echo; echo "go $(awk '$1=="go"{print $2; exit}' "$kmod")"; echo
    echo "require k8s.io/kubernetes v$K"; echo; echo "replace ("
    awk '$2=="=>" && $3 ~ /^\.\/staging\// {print $1}' "$kmod" | while read -r m; do echo "	$m => $m v0.${K#1.}"; done
    echo ")"
  } > "$w/go.mod"
  for c in "$@"; do
    case $c in
      kube-apiserver) f=cmd/kube-apiserver/apiserver.go ;;
      kubectl) f=cmd/kubectl/kubectl.go ;;
      kube-controller-manager) f=cmd/kube-controller-manager/controller-manager.go ;;
      kubelet) f=cmd/kubelet/kubelet.go ;;
      kube-scheduler) f=cmd/kube-scheduler/scheduler.go ;;
      kube-proxy) f=cmd/kube-proxy/proxy.go ;;
      *) echo "k8s_wrapper: unknown command $c" >&2; return 1 ;;
    esac
    mkdir -p "$w/cmd/$c"
    sed -n '/^package main/,$p' "$kdir/$f" > "$w/cmd/$c/main.go"
  done
  (cd "$w" && $NICE go mod tidy)
}

# k8s_build DIR OUT CMD...: build each CMD of the wrapper module in DIR into OUT, static, with the
# version the binaries report (`--version`: Kubernetes vK) stamped in.
k8s_build() {
  local w=$1 out=$2 c p t ld="-s -w"; shift 2
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld="$ld -X $p.gitVersion=v$K -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$K" | cut -d. -f2)"
    ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for c in "$@"; do
    t=$(date +%s); (cd "$w" && $NICE go build -trimpath -ldflags "$ld" -o "$out/$c" "./cmd/$c")
    echo "built $c in $(( $(date +%s)-t ))s" >&2
  done
}
