#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, from locally built binaries, no registry:
# containerd (CRI) + runc + bridge CNI, etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy (iptables), CoreDNS and kube-router's firewall (NetworkPolicy
# enforcement by iptables + ipset). Pods really run; probes, logs, exec, port-forward, Services, DNS work.
#
# Usage: node-up.sh CP_BIN NODE_BIN RUN_DIR
#   CP_BIN   : etcd, kube-apiserver, kube-controller-manager, kubectl (build-toolchain.sh)
#   NODE_BIN : kubelet, kube-scheduler, kube-proxy, coredns, kube-router (build-node.sh)
#   RUN_DIR  : everything this run writes (PKI, configs, logs, containerd root/state, kubelet root,
#              the PersistentVolumes' directories, pidfiles). Stop with node-down.sh RUN_DIR.
# Writes RUN_DIR/kubeconfig (admin), RUN_DIR/env (PIDs, ports, socket), RUN_DIR/pids/*.pid.
# Storage: a default StorageClass `local-hostpath` (no provisioner) and PV_COUNT hostPath
# PersistentVolumes of PV_SIZE each (directories under RUN_DIR/pv, mode 0777: hostPath volumes
# ignore fsGroup), reclaimPolicy Retain - a static provisioner made by the test environment.
# Env:
#   IMAGES_DIR  dir(s), ':'-separated, of docker-archive/OCI *.tar to import into containerd's k8s.io
#               namespace (make-node-images.sh output; MUST hold pause.tar).
#   POD_CIDR (10.244.0.0/24)  SVC_CIDR (10.0.0.0/24)  NODE_NAME (kube-node)  BRIDGE (kn0): the CNI
#               bridge, created with the pods' gateway IP; the API server listens there (host + pods).
#   PV_COUNT (40)  PV_SIZE (10Gi)  NODE_READY_TIMEOUT (120 s)  API_PORT (6443, on the gateway IP)
#   KUBE_UP_WATCH_PID: if set, a watchdog runs node-down.sh once that process is gone (a killed
#               test runner leaves no node behind).
#   CGROUP_DRIVER (cgroupfs)   CONTAINERD (containerd on PATH)   CNI_BIN (/usr/lib/cni)
# Needs root, containerd >= 1.6 (< 2: kubelet 1.35 is the last to take 1.6), runc,
# containernetworking-plugins, iptables, ipset, conntrack, openssl, python3 (install-node-deps.sh).
# Blockers met on this kind of machine, and their workarounds, are commented where they are handled
# (no CAP_SYS_RESOURCE for root, cgroup v1, fixed host paths of containerd 1.6 and the kubelet).
set -euo pipefail
CP=${1:?usage: node-up.sh CP_BIN NODE_BIN RUN_DIR}; NB=${2:?node bin}; RUN=${3:?run dir}
CP=$(cd "$CP" && pwd); NB=$(cd "$NB" && pwd)
mkdir -p "$RUN"; RUN=$(cd "$RUN" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
POD_CIDR=${POD_CIDR:-10.244.0.0/24}; SVC_CIDR=${SVC_CIDR:-10.0.0.0/24}
NODE=${NODE_NAME:-kube-node}; BRIDGE=${BRIDGE:-kn0}
CGD=${CGROUP_DRIVER:-cgroupfs}; CTRD=${CONTAINERD:-containerd}; CNI_BIN=${CNI_BIN:-/usr/lib/cni}
for b in "$CP/etcd" "$CP/kube-apiserver" "$CP/kube-controller-manager" "$CP/kubectl" "$NB/kubelet" \
         "$NB/kube-scheduler" "$NB/kube-proxy" "$NB/coredns" "$NB/kube-router"; do
  [ -x "$b" ] || { echo "node-up: $b missing" >&2; exit 1; }
done
GW=$(python3 -c 'import ipaddress,sys;print(next(ipaddress.ip_network(sys.argv[1]).hosts()))' "$POD_CIDR")
SVC1=$(python3 -c 'import ipaddress,sys;print(next(ipaddress.ip_network(sys.argv[1]).hosts()))' "$SVC_CIDR")
PFX=${POD_CIDR#*/}
PIDS=$RUN/pids; LOG=$RUN/logs; PKI=$RUN/pki; CFG=$RUN/config
mkdir -p "$PIDS" "$LOG" "$PKI" "$CFG" "$RUN/cni/net.d"
T0=$(date +%s.%N)
elapsed() { python3 -c "import time;print(round(time.time()-$T0,1))"; }
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
start() {  # start NAME CMD...: background, log to LOG/NAME.log, pid to PIDS/NAME.pid
  local n=$1; shift
  "$@" > "$LOG/$n.log" 2>&1 &
  echo $! > "$PIDS/$n.pid"
}
alive() { kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }
die() {  # report, then stop what was started (KEEP_ON_FAIL=1: leave it for node-down.sh)
  echo "node-up: $*" >&2; for f in "$LOG"/*.log; do echo "== $f" >&2; tail -15 "$f" >&2; done
  [ "${KEEP_ON_FAIL:-0}" = 1 ] || "$HERE/node-down.sh" "$RUN" >&2
  exit 1
}

# ---------------------------------------------------------------- PKI (openssl) ---------------
cert() {  # cert NAME SUBJ EXT   (signed by the CA)
  [ -f "$PKI/$1.crt" ] && return 0
  openssl req "${EC[@]}" -subj "$2" -keyout "$PKI/$1.key" -out "$PKI/$1.csr" 2>/dev/null
  printf '%b\n' "$3" > "$PKI/$1.ext"
  openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
}
# ECDSA P-256 throughout (~30 ms for all keys, where nine RSA-2048 keys take 2-3 s on a loaded box).
EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if [ ! -f "$PKI/ca.crt" ]; then
  openssl req -x509 "${EC[@]}" -days 3650 -subj "/CN=kube-node-ca" \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/sa.key" 2>/dev/null
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
CLI='extendedKeyUsage=clientAuth'
cert apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,IP:$GW,IP:$SVC1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth"
cert admin "/O=system:masters/CN=admin" "$CLI"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$CLI"
cert kubelet-client "/O=system:nodes/CN=system:node:$NODE" "$CLI"
cert kubelet-serving "/O=system:nodes/CN=system:node:$NODE" "subjectAltName=IP:127.0.0.1,IP:$GW,DNS:$NODE,DNS:localhost\nextendedKeyUsage=serverAuth"
cert scheduler "/CN=system:kube-scheduler" "$CLI"
cert controller-manager "/CN=system:kube-controller-manager" "$CLI"
cert kube-proxy "/CN=system:kube-proxy" "$CLI"
chmod 600 "$PKI"/*.key
echo "node-up: PKI ready after $(elapsed)s"

# ------------------------------------------------------- host prerequisites (recorded) --------
# Bridge with the pod gateway IP (the bridge CNI plugin reuses it). API server listens there.
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge; echo "$BRIDGE" > "$RUN/created-bridge"
fi
ip addr replace "$GW/$PFX" dev "$BRIDGE"; ip link set "$BRIDGE" up
# Service IPs route to the bridge, never to the default gateway: without a kube-proxy DNAT a
# packet to a ClusterIP dies here instead of leaving the machine (goes with the bridge).
ip route replace "$SVC_CIDR" dev "$BRIDGE" src "$GW"
# The bridge plugin (isGateway) turns on ip_forward; remember the old value for node-down.
[ -f "$RUN/ip_forward.before" ] || cat /proc/sys/net/ipv4/ip_forward > "$RUN/ip_forward.before"
# Guard: pods may talk to each other, to Services and to this host, never leave the machine.
if command -v iptables >/dev/null; then
  GUARD=(FORWARD -s "$POD_CIDR" ! -d "$POD_CIDR" -m comment --comment kube-node-guard -j DROP)
  iptables -C "${GUARD[@]}" 2>/dev/null || { iptables -I "${GUARD[@]}"; echo "${GUARD[*]}" > "$RUN/iptables-guard"; }
fi
# kubelet/kube-proxy leave an (empty) KUBE-FIREWALL chain + INPUT/OUTPUT jumps in iptables and
# ip6tables: node-down removes it if it was not there before.
for ipt in iptables ip6tables; do
  command -v $ipt >/dev/null && ! $ipt -S KUBE-FIREWALL >/dev/null 2>&1 && echo $ipt >> "$RUN/created-kube-firewall"
done
# cgroup v1: kubelet wants its --cgroup-root to exist in every hierarchy; cgroup v2: nothing to do.
CGROOT=/kube-node-$NODE
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
  for h in /sys/fs/cgroup/*/; do
    case $h in */unified/) continue ;; esac
    [ -f "$h/cgroup.procs" ] || continue
    mkdir -p "$h$CGROOT"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h$CGROOT/cpuset.cpus"; cat "$h/cpuset.mems" > "$h$CGROOT/cpuset.mems"
    fi
  done
  echo "$CGROOT" > "$RUN/cgroup-root"
  CGV1=1
else
  CGV1=0
fi
# netns created by containerd's CRI: under its state dir (netns_mounts_under_state_dir), else
# /var/run/netns. The kubelet keeps legacy log links in /var/log/containers (a fixed path);
# containerd's shims put sockets in /run/containerd/s (fixed in 1.6). Record what existed.
ls /var/run/netns 2>/dev/null | sort > "$RUN/netns.before" || true
for d in /var/log/containers /run/containerd; do [ -e "$d" ] || echo "$d" >> "$RUN/created-dirs"; done

# ------------------------------------------------------------------ containerd ----------------
CD=$RUN/containerd; mkdir -p "$CD"
SOCK=$CD/containerd.sock
cat > "$CFG/containerd.toml" <<EOF
version = 2
root = "$CD/root"
state = "$CD/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "$CD/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/kube-node/pause:1"
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # Without CAP_SYS_RESOURCE (some sandboxes/VMs) runc cannot lower oom_score_adj (the pause
  # container gets -998): "can't get final child's PID from pipe: EOF". Clamp to ours instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = $([ "$CGD" = systemd ] && echo true || echo false)
        Root = "$CD/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$RUN/cni/net.d"
    max_conf_num = 1
EOF
cat > "$RUN/cni/net.d/10-kube-node.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kube-node",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GW"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$RUN/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
start containerd "$CTRD" --config "$CFG/containerd.toml"
for i in $(seq 1 100); do [ -S "$SOCK" ] && ctr -a "$SOCK" version >/dev/null 2>&1 && break; alive containerd || die "containerd died"; sleep 0.1; done
[ -S "$SOCK" ] || die "containerd socket not up"
echo "node-up: containerd up after $(elapsed)s"
IFS=: read -r -a IDIRS <<<"${IMAGES_DIR:-}"
for d in "${IDIRS[@]}"; do
  for t in "$d"/*.tar; do
    [ -f "$t" ] || continue
    ti=$(date +%s.%N)
    ctr -a "$SOCK" -n k8s.io images import "$t" >/dev/null || die "import $t failed"
    echo "node-up: imported $(basename "$t") in $(python3 -c "import time;print(round(time.time()-$ti,1))")s"
  done
done
IMGS=$(ctr -a "$SOCK" -n k8s.io images ls -q)   # (not piped into grep -q: SIGPIPE + pipefail)
grep -qx 'localhost/kube-node/pause:1' <<<"$IMGS" \
  || die "sandbox image localhost/kube-node/pause:1 missing (IMAGES_DIR=.../pause.tar from make-pause-image.sh)"
echo "node-up: images imported after $(elapsed)s"

# ------------------------------------------------------- etcd + kube-apiserver ---------------
# The API server on 6443 (API_PORT), as kubeadm's: NetworkPolicies meet the port after the
# kubernetes Service's DNAT, and charts allow egress to 443/6443 (a random port would be refused).
EP=$(freeport); PP=$(freeport); SP=${API_PORT:-6443}; KP=$(freeport)
ETCD_DATA=$RUN/etcd; mkdir -p "$ETCD_DATA"
start etcd "$CP/etcd" --name=kn --data-dir="$ETCD_DATA" --unsafe-no-fsync \
  --listen-client-urls=http://127.0.0.1:$EP --advertise-client-urls=http://127.0.0.1:$EP \
  --listen-peer-urls=http://127.0.0.1:$PP --initial-advertise-peer-urls=http://127.0.0.1:$PP \
  --initial-cluster=kn=http://127.0.0.1:$PP --log-level=warn
start kube-apiserver "$CP/kube-apiserver" --etcd-servers=http://127.0.0.1:$EP \
  --bind-address="$GW" --advertise-address="$GW" --secure-port="$SP" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$PKI/ca.crt" \
  --kubelet-preferred-address-types=InternalIP \
  --service-cluster-ip-range="$SVC_CIDR" \
  --service-account-issuer="https://kubernetes.default.svc" \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true --endpoint-reconciler-type=lease --v=1
API=https://$GW:$SP
kcfg() {  # kcfg FILE CERTNAME
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kn
  cluster: {server: "$API", certificate-authority: "$PKI/ca.crt"}
users:
- name: u
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: kn
  context: {cluster: kn, user: u, namespace: default}
current-context: kn
EOF
}
kcfg "$RUN/kubeconfig" admin
kcfg "$CFG/kubelet.kubeconfig" kubelet-client
kcfg "$CFG/scheduler.kubeconfig" scheduler
kcfg "$CFG/controller-manager.kubeconfig" controller-manager
kcfg "$CFG/kube-proxy.kubeconfig" kube-proxy
K="$CP/kubectl --kubeconfig=$RUN/kubeconfig"
for i in $(seq 1 600); do
  $K get --raw /readyz >/dev/null 2>&1 && break
  alive kube-apiserver || die "kube-apiserver died"; sleep 0.1
done
$K get --raw /readyz >/dev/null 2>&1 || die "apiserver not ready"
echo "node-up: apiserver ready after $(elapsed)s ($API)"

# ------------------------------------------------ controller-manager + scheduler ----------------
start kube-controller-manager "$CP/kube-controller-manager" \
  --kubeconfig="$CFG/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CFG/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CFG/controller-manager.kubeconfig" \
  --leader-elect=false --secure-port=0 --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range="$SVC_CIDR" --allocate-node-cidrs=true --cluster-cidr="$POD_CIDR" \
  --node-cidr-mask-size="$PFX" \
  --pvclaimbinder-sync-period=2s --v=1
start kube-scheduler "$NB/kube-scheduler" --kubeconfig="$CFG/scheduler.kubeconfig" \
  --authentication-kubeconfig="$CFG/scheduler.kubeconfig" --authorization-kubeconfig="$CFG/scheduler.kubeconfig" \
  --leader-elect=false --secure-port=0 --v=1

# ------------------------------------------ cluster DNS: CoreDNS as a Deployment (after the node) ---
DNS_IP=$(python3 -c 'import ipaddress,sys;print(ipaddress.ip_network(sys.argv[1])[10])' "$SVC_CIDR")
CLUSTER_DNS="[\"$DNS_IP\"]"

# ---------------------------------------------------------------------- kubelet --------------
KL=$RUN/kubelet; mkdir -p "$KL" "$RUN/pod-logs"
cat > "$CFG/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$GW"
port: $KP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://$SOCK"
cgroupDriver: $CGD
cgroupRoot: "$([ $CGV1 = 1 ] && echo "$CGROOT" || echo /)"
cgroupsPerQOS: true
enforceNodeAllocatable: []
failSwapOn: false
oomScoreAdj: 0
failCgroupV1: false
podCIDR: "$POD_CIDR"
podLogsDir: "$RUN/pod-logs"
clusterDomain: cluster.local
clusterDNS: $CLUSTER_DNS
resolvConf: /etc/resolv.conf
registerNode: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 87600h
evictionHard: {}
evictionSoftGracePeriod: {}
evictionPressureTransitionPeriod: 0s
maxPods: 50
protectKernelDefaults: false
makeIPTablesUtilChains: false
localStorageCapacityIsolation: false
serverTLSBootstrap: false
rotateCertificates: false
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 20s
shutdownGracePeriod: 0s
logging: {verbosity: 1}
EOF
start kubelet "$NB/kubelet" --config="$CFG/kubelet.yaml" --kubeconfig="$CFG/kubelet.kubeconfig" \
  --root-dir="$KL" --hostname-override="$NODE" --node-ip="$GW" \
  --node-labels="kube-node/role=all"

cat > "$CFG/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$CFG/kube-proxy.kubeconfig"}
mode: iptables
clusterCIDR: "$POD_CIDR"
hostnameOverride: "$NODE"
bindAddress: 127.0.0.1
healthzBindAddress: ""
metricsBindAddress: ""
conntrack: {maxPerCore: 0}
iptables: {localhostNodePorts: false, masqueradeAll: false}
EOF
  echo "$NB/kube-proxy" > "$RUN/kube-proxy-bin"   # node-down.sh runs its --cleanup
start kube-proxy "$NB/kube-proxy" --config="$CFG/kube-proxy.yaml" --v=1

cat > "$RUN/env" <<EOF
KUBECONFIG=$RUN/kubeconfig
API_SERVER=$API
NODE_NAME=$NODE
CONTAINERD_SOCK=$SOCK
KUBELET_PORT=$KP
ETCD_PORT=$EP
POD_CIDR=$POD_CIDR
SVC_CIDR=$SVC_CIDR
EOF
for f in "$PIDS"/*.pid; do n=$(basename "$f" .pid); echo "PID_$(echo "$n" | tr a-z- A-Z_)=$(cat "$f")" >> "$RUN/env"; done

# --------------------------------------------------------------- wait for Node Ready -----------
TO=${NODE_READY_TIMEOUT:-120}
for i in $(seq 1 $((TO*5))); do
  st=$($K get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
  [ "$st" = True ] && break
  for p in kubelet kube-scheduler kube-controller-manager containerd; do alive $p || die "$p died"; done
  sleep 0.2
done
[ "$st" = True ] || die "node $NODE not Ready after ${TO}s"
# The default ServiceAccount must exist before pods can be admitted.
for i in $(seq 1 150); do $K get sa default >/dev/null 2>&1 && break; sleep 0.2; done

# ------------------------------------------- storage: a static provisioner's PersistentVolumes ---
PVN=${PV_COUNT:-40}; PVS=${PV_SIZE:-10Gi}; mkdir -p "$RUN/pv"
{
  printf 'apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: local-hostpath\n'
  printf '  annotations: {storageclass.kubernetes.io/is-default-class: "true"}\n'
  printf 'provisioner: kubernetes.io/no-provisioner\nreclaimPolicy: Retain\nvolumeBindingMode: Immediate\n'
  for i in $(seq -w 1 "$PVN"); do
    mkdir -p "$RUN/pv/pv$i"; chmod 0777 "$RUN/pv/pv$i"
    printf -- '---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {name: local-pv%s}\n' "$i"
    printf 'spec:\n  capacity: {storage: %s}\n  accessModes: [ReadWriteOnce]\n' "$PVS"
    printf '  persistentVolumeReclaimPolicy: Retain\n  storageClassName: local-hostpath\n'
    printf '  hostPath: {path: "%s", type: Directory}\n' "$RUN/pv/pv$i"
  done
} > "$CFG/storage.yaml"
$K apply -f "$CFG/storage.yaml" >/dev/null || die "storage objects refused"
sed "s/@DNS_IP@/$DNS_IP/" "$HERE/coredns.yaml" | $K apply -f - >/dev/null || die "CoreDNS objects refused"

# ----------------------- NetworkPolicy: kube-router's firewall alone (iptables + ipset), a host process ---
# (--run-router=false: the bridge CNI routes; --run-service-proxy=false: kube-proxy serves Services.)
# Ready once its pod firewall chain exists: it has synced every policy and Pod once.
start kube-router "$NB/kube-router" --kubeconfig="$RUN/kubeconfig" --hostname-override="$NODE" \
  --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false --enable-ipv6=false \
  --service-cluster-ip-range="$SVC_CIDR" --health-port=0 --metrics-port=0 --iptables-sync-period=1m --v=1
echo "$NB/kube-router" > "$RUN/kube-router-bin"   # node-down.sh runs its --cleanup-config
for i in $(seq 1 $((TO*5))); do
  iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 && break
  alive kube-router || die "kube-router died"; sleep 0.2
done
iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 || die "kube-router made no firewall chain in ${TO}s"

$K -n kube-system rollout status deployment/coredns --timeout="${TO}s" >/dev/null || die "CoreDNS not Ready in ${TO}s"

if [ -n "${KUBE_UP_WATCH_PID:-}" ]; then
  # Polls (2 s) for the watched process; node-down.sh stops everything node-up started.
  ( while kill -0 "$KUBE_UP_WATCH_PID" 2>/dev/null; do sleep 2; done; exec "$HERE/node-down.sh" "$RUN" --purge ) \
    < /dev/null > "$RUN/watchdog.log" 2>&1 &
  echo "WATCHDOG_PID=$!" >> "$RUN/env"
fi
echo "node-up: node $NODE Ready after $(elapsed)s; export KUBECONFIG=$RUN/kubeconfig"
