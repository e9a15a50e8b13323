#!/usr/bin/env bash
# Build the images a node needs, locally, with no registry and no container engine:
#   localhost/kube-node/pause:1    - the sandbox image: a static C `pause` (gcc -static)
#   localhost/kube-node/busybox:1  - a test image: Debian's static busybox + applet links
#   localhost/kube-node/coredns:1  - cluster DNS: NODE_BIN/coredns (build-node.sh), alone in the image
# Usage: make-node-images.sh OUT_DIR NODE_BIN  -> OUT_DIR/*.tar (docker-archive); node-up.sh imports them.
# Needs gcc + libc6-dev (libc.a), python3, /bin/busybox statically linked (Debian's busybox-static:
# its wget segfaults, static glibc + NSS, and its nc has no -z; fine for tests).
set -euo pipefail
OUT=${1:?usage: make-node-images.sh OUT_DIR NODE_BIN}; NB=${2:?usage: make-node-images.sh OUT_DIR NODE_BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cat > "$W/pause.c" <<'C'
/* Minimal sandbox "pause": holds the pod's namespaces, reaps zombies, exits on INT/TERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void sigdown(int signo) { psignal(signo, "pause: shutting down"); exit(0); }
static void sigreap(int signo) { (void)signo; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  if (getpid() != 1) fprintf(stderr, "pause: warning, not pid 1\n");
  struct sigaction a = {0};
  a.sa_handler = sigdown;
  if (sigaction(SIGINT, &a, NULL) < 0 || sigaction(SIGTERM, &a, NULL) < 0) return 1;
  a.sa_handler = sigreap; a.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &a, NULL) < 0) return 2;
  for (;;) pause();
}
C
mkdir -p "$W/pause-root"
gcc -Os -static -o "$W/pause-root/pause" "$W/pause.c"
strip "$W/pause-root/pause"
python3 "$HERE/mkimage.py" "$W/pause-root" localhost/kube-node/pause:1 "$OUT/pause.tar" \
  --entrypoint '["/pause"]' --user 65535:65535
BB=${BUSYBOX:-/bin/busybox}
if [ -x "$BB" ] && ! ldd "$BB" >/dev/null 2>&1; then
  R=$W/bb-root; mkdir -p "$R/bin" "$R/tmp" "$R/etc" "$R/proc" "$R/sys" "$R/dev" "$R/var/www"
  chmod 1777 "$R/tmp"
  cp "$BB" "$R/bin/busybox"
  for app in $("$BB" --list); do [ "$app" = busybox ] || ln -s busybox "$R/bin/$app"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$R/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
  python3 "$HERE/mkimage.py" "$R" localhost/kube-node/busybox:1 "$OUT/busybox.tar" \
    --cmd '["/bin/sh"]' --env PATH=/bin
else
  echo "make-node-images: no static busybox at $BB (apt-get install busybox-static)" >&2; exit 1
fi
R=$W/dns-root; mkdir -p "$R/etc/coredns"
cp "$NB/coredns" "$R/coredns"
python3 "$HERE/mkimage.py" "$R" localhost/kube-node/coredns:1 "$OUT/coredns.tar" --entrypoint '["/coredns"]'
