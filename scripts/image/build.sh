#!/usr/bin/env bash
# Build memplane's container image with Podman, with no registry: the base is Debian 12
# (bookworm) made by debootstrap from Debian's archive and imported into Podman's store.
#   scripts/image/build.sh            -> localhost/memplane:dev (prints the image id last)
# Env: IMAGE (localhost/memplane:dev), MEMPLANE_IMAGE_CACHE (~/.cache/memplane-image).
# Needs root; installs podman, runc and debootstrap from Debian when they are missing.
# ~7 min cold (debootstrap ~3, dependencies ~3); ~30 s when only memplane's code changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${IMAGE:-localhost/memplane:dev}
CACHE=${MEMPLANE_IMAGE_CACHE:-$HOME/.cache/memplane-image}
SUITE=bookworm
BASE=localhost/memplane-base:$SUITE
export CONTAINERS_CONF=$PWD/scripts/image/containers.conf
missing=""
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then echo "build.sh: missing$missing (apt-get install podman runc debootstrap)" >&2; exit 1; fi
  echo "installing podman, runc and debootstrap from Debian" >&2
  apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc debootstrap >&2
fi
if ! podman image exists "$BASE"; then
  ROOTFS=$CACHE/rootfs-$SUITE
  if [ ! -f "$ROOTFS/.complete" ]; then
    rm -rf "$ROOTFS"; mkdir -p "$CACHE"
    echo "debootstrap $SUITE (minbase + python3) into $ROOTFS" >&2
    debootstrap --variant=minbase --include=python3,ca-certificates "$SUITE" "$ROOTFS" http://deb.debian.org/debian >&2
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    touch "$ROOTFS/.complete"
  fi
  echo "importing the base image $BASE" >&2
  tar -C "$ROOTFS" --exclude=./.complete -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE" >&2
fi
t=$(date +%s)
# pip inside the build trusts what pip trusts here (PIP_CERT; this machine reaches PyPI
# through a TLS-intercepting proxy), passed as a build secret: in no layer of the image.
CA_BUNDLE=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
podman build --network host --pull=never --build-arg BASE_IMAGE="$BASE" --secret id=ca-bundle,src="$CA_BUNDLE" \
  -t "$IMAGE" -f Dockerfile . >&2
echo "built $IMAGE in $(( $(date +%s) - t ))s: $(podman image inspect "$IMAGE" --format '{{.Size}}') bytes" >&2
podman image inspect "$IMAGE" --format '{{.Id}}'
