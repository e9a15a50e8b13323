#!/usr/bin/env python3
"""Write a one-layer container image as a docker-archive tarball (what `docker save` and
`podman save` write) from a local directory tree, with no registry and no container engine.
containerd >= 1.6 imports it (`ctr -n k8s.io images import OUT.tar`); so does `podman load`.

usage: mkimage.py ROOTFS_DIR NAME:TAG OUT.tar [--entrypoint JSON] [--cmd JSON]
                  [--env K=V ...] [--workdir DIR] [--user UID[:GID]]

Files are stored owned by root (uid/gid 0) with mtime 0, so the same tree gives the same image.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
from typing import Any

EPOCH = "1970-01-01T00:00:00Z"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def layer_tar(root: str) -> bytes:
    """The tree under *root* as one uncompressed tar layer (sorted, root-owned, mtime 0)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                full = os.path.join(dirpath, name)
                info = tf.gettarinfo(full, arcname=os.path.relpath(full, root))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isreg():
                    with open(full, "rb") as f:
                        tf.addfile(info, f)
                else:
                    tf.addfile(info)
    return buf.getvalue()


def image_config(diff_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """The OCI/docker image config: one layer, the process settings given on the command line."""
    process: dict[str, Any] = {"Env": args.env or [DEFAULT_PATH], "WorkingDir": args.workdir, "User": args.user}
    if args.entrypoint is not None:
        process["Entrypoint"] = args.entrypoint
    if args.cmd is not None:
        process["Cmd"] = args.cmd
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH,
        "config": process,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": EPOCH, "created_by": "mkimage.py"}],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rootfs")
    ap.add_argument("ref")
    ap.add_argument("out")
    ap.add_argument("--entrypoint", type=json.loads, default=None)
    ap.add_argument("--cmd", type=json.loads, default=None)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--user", default="")
    args = ap.parse_args()
    layer = layer_tar(args.rootfs)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(image_config(diff_id, args), sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [args.ref], "Layers": [layer_name]}]).encode()
    with tarfile.open(args.out, "w") as out:
        for name, data in ((config_name, config), (layer_name, layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            out.addfile(info, io.BytesIO(data))
    print(f"{args.out}: {args.ref} layer {diff_id[:19]} ({len(layer)} bytes)")


if __name__ == "__main__":
    main()
