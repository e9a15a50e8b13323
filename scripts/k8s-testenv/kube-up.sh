#!/usr/bin/env bash
# Start a Kubernetes control plane on loopback, envtest style (no kubelet, no scheduler: Pods never run):
# etcd, kube-apiserver and, when BIN_DIR has it, kube-controller-manager (garbagecollector, namespace,
# serviceaccount controllers, and pvc-protection so a deleted claim is really removed). Usage: kube-up.sh BIN_DIR RUN_DIR
#
# Writes RUN_DIR/pki/ (ECDSA: CA, apiserver serving cert for 127.0.0.1, admin client cert in system:masters,
# service-account key pair, a static admin token), RUN_DIR/kubeconfig (admin, token user; `admin-cert`
# user too), RUN_DIR/env (ETCD_PID API_PID KCM_PID WATCHDOG_PID ETCD_PORT API_PORT ETCD_DATA KUBECONFIG,
# sourceable), logs RUN_DIR/{etcd,apiserver,kcm}.log. etcd keeps its data in /dev/shm when it can.
# Returns once /readyz answers and, with the controller-manager, once it has created the `default`
# ServiceAccount (proof it is running); prints one "ready after …" line. Fails (non-zero, log tail on
# stderr, everything it started stopped again) if a process dies or readiness takes over 60 s.
# Stop with kube-down.sh RUN_DIR.
# Env: KUBE_UP_WATCH_PID — if set, a watchdog runs kube-down.sh once that process is gone (so a killed
#      test runner leaves no apiserver behind).
set -euo pipefail
BIN=${1:?usage: kube-up.sh BIN_DIR RUN_DIR}; RUN=${2:?usage: kube-up.sh BIN_DIR RUN_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$RUN"; RUN=$(cd "$RUN" && pwd)
for b in etcd kube-apiserver; do [ -x "$BIN/$b" ] || { echo "kube-up: $BIN/$b missing" >&2; exit 1; }; done
# Three distinct free loopback ports (held together while chosen): etcd client, etcd peer, apiserver.
read -r EP PP SP < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
PKI=$RUN/pki; mkdir -p "$PKI"
if [ ! -f "$PKI/tokens.csv" ]; then
  # ECDSA P-256 throughout (CA, certificates, service-account signing key: ES256 tokens): ~30 ms for all
  # keys, where four RSA-2048 keys take 1-2 s on a loaded 2-core machine.
  EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${EC[@]}" -days 3650 -subj "/CN=test-ca" -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
  openssl req "${EC[@]}" -subj "/CN=kube-apiserver" -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > "$PKI/san.ext"
  openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$PKI/san.ext" -out "$PKI/apiserver.crt" 2>/dev/null
  openssl req "${EC[@]}" -subj "/O=system:masters/CN=admin" -keyout "$PKI/admin.key" -out "$PKI/admin.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' > "$PKI/client.ext"
  openssl x509 -req -in "$PKI/admin.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$PKI/client.ext" -out "$PKI/admin.crt" 2>/dev/null
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/sa.key" 2>/dev/null
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  TOKEN=$(openssl rand -hex 16)
  echo "$TOKEN,admin,admin-uid,system:masters" > "$PKI/tokens.csv"
fi
TOKEN=$(cut -d, -f1 "$PKI/tokens.csv")
ETCD_DATA=$(mktemp -d /dev/shm/etcd.XXXXXX 2>/dev/null || mktemp -d -t etcd.XXXXXX)
# etcd >= 3.5 only; the help is captured first (`| grep -q` under pipefail fails on SIGPIPE).
NOFSYNC=""; ETCD_HELP=$("$BIN/etcd" --help 2>&1 || true)
if grep -q -- --unsafe-no-fsync <<<"$ETCD_HELP"; then NOFSYNC=--unsafe-no-fsync; fi

# Anything that fails from here on stops what was started (kube-down.sh reads RUN_DIR/env).
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
fail() { echo "kube-up: $1" >&2; [ -f "$RUN/$2" ] && tail -30 "$RUN/$2" >&2; "$HERE/kube-down.sh" "$RUN" >&2 || true; exit 1; }
trap 'fail "interrupted" apiserver.log' INT TERM

T0=$EPOCHREALTIME
# shellcheck disable=SC2086  # NOFSYNC is empty or one flag
"$BIN/etcd" --name=test --data-dir="$ETCD_DATA" $NOFSYNC \
  --listen-client-urls="http://127.0.0.1:$EP" --advertise-client-urls="http://127.0.0.1:$EP" \
  --listen-peer-urls="http://127.0.0.1:$PP" --initial-advertise-peer-urls="http://127.0.0.1:$PP" \
  --initial-cluster="test=http://127.0.0.1:$PP" --log-level=warn < /dev/null > "$RUN/etcd.log" 2>&1 &
ETCD_PID=$!
"$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$EP" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$SP" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --cert-dir="$RUN/certs" \
  --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --service-account-issuer="https://127.0.0.1:$SP" --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --authorization-mode=RBAC --disable-admission-plugins=ServiceAccount --allow-privileged=true \
  --v=1 < /dev/null > "$RUN/apiserver.log" 2>&1 &
API_PID=$!
cat > "$RUN/env" <<EOV
ETCD_PID=$ETCD_PID
API_PID=$API_PID
KCM_PID=
WATCHDOG_PID=
ETCD_PORT=$EP
API_PORT=$SP
ETCD_DATA=$ETCD_DATA
KUBECONFIG=$RUN/kubeconfig
EOV
cat > "$RUN/kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:$SP", certificate-authority: "$PKI/ca.crt"}
users:
- name: admin
  user: {token: "$TOKEN"}
- name: admin-cert
  user: {client-certificate: "$PKI/admin.crt", client-key: "$PKI/admin.key"}
contexts:
- name: test
  context: {cluster: test, user: admin, namespace: default}
current-context: test
EOK
if [ -n "${KUBE_UP_WATCH_PID:-}" ]; then
  # Polls (2 s) for the watched process; exec keeps the watchdog's PID for kube-down.sh to skip itself.
  ( while kill -0 "$KUBE_UP_WATCH_PID" 2>/dev/null; do sleep 2; done; exec "$HERE/kube-down.sh" "$RUN" ) \
    < /dev/null > "$RUN/watchdog.log" 2>&1 &
  sed -i "s/^WATCHDOG_PID=.*/WATCHDOG_PID=$!/" "$RUN/env"
fi

api_get() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$SP$1" >/dev/null 2>&1; }
DEADLINE=$(( $(date +%s) + 60 ))
until api_get /readyz; do
  kill -0 "$ETCD_PID" 2>/dev/null || fail "etcd died" etcd.log
  kill -0 "$API_PID" 2>/dev/null || fail "kube-apiserver died" apiserver.log
  [ "$(date +%s)" -lt "$DEADLINE" ] || fail "kube-apiserver not ready after 60s" apiserver.log
  sleep 0.05
done
T1=$EPOCHREALTIME

KCM_NOTE=""
if [ -x "$BIN/kube-controller-manager" ]; then
  cat > "$RUN/kcm.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:$SP", certificate-authority: "$PKI/ca.crt"}
users:
- name: admin-cert
  user: {client-certificate: "$PKI/admin.crt", client-key: "$PKI/admin.key"}
contexts:
- name: test
  context: {cluster: test, user: admin-cert}
current-context: test
EOK
  "$BIN/kube-controller-manager" --kubeconfig="$RUN/kcm.kubeconfig" \
    --controllers=garbagecollector,namespace,serviceaccount,persistentvolumeclaim-protection-controller --leader-elect=false --secure-port=0 \
    --use-service-account-credentials=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --v=1 < /dev/null > "$RUN/kcm.log" 2>&1 &
  KCM_PID=$!
  sed -i "s/^KCM_PID=.*/KCM_PID=$KCM_PID/" "$RUN/env"
  # The serviceaccount controller creating default/default proves the controller-manager is up and acting.
  until api_get /api/v1/namespaces/default/serviceaccounts/default; do
    kill -0 "$KCM_PID" 2>/dev/null || fail "kube-controller-manager died" kcm.log
    [ "$(date +%s)" -lt "$DEADLINE" ] || fail "kube-controller-manager made no default ServiceAccount in 60s" kcm.log
    sleep 0.05
  done
  KCM_NOTE=", controller-manager acting after $(secs "$T1" "$EPOCHREALTIME")s more"
fi
trap - INT TERM
echo "ready after $(secs "$T0" "$T1")s$KCM_NOTE (apiserver :$SP, etcd :$EP, run dir $RUN)"
