"""Regenerate the protobuf/gRPC Python code from proto/ into services/memplane/v1/.

Run: python scripts/gen_proto.py        (writes the files)
     python scripts/gen_proto.py --check (exits 1 if the committed files differ)

Uses grpcio-tools' bundled protoc with `-I proto`, so generated modules import each
other as `memplane.v1.<name>_pb2` without rewriting; mypy-protobuf writes the .pyi stubs.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "services"
PACKAGE_DIR = Path("memplane") / "v1"


def generate(out_dir: Path) -> None:
    """Run protoc on every .proto under proto/memplane/v1 into *out_dir*."""
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in (PROTO_DIR / PACKAGE_DIR).glob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    (out_dir / PACKAGE_DIR / "__init__.py").write_text(
        '"""Generated protobuf and gRPC code for memplane.v1 (do not edit)."""\n'
    )


def generated_files(base: Path) -> list[Path]:
    return sorted(p.relative_to(base) for p in (base / PACKAGE_DIR).glob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if regenerating changes anything")
    ns = parser.parse_args()
    if not ns.check:
        target = OUT_DIR / PACKAGE_DIR
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        generate(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        (tmp_path / PACKAGE_DIR).mkdir(parents=True)
        generate(tmp_path)
        fresh, committed = generated_files(tmp_path), generated_files(OUT_DIR)
        differ = [
            str(p) for p in fresh if p not in committed or not filecmp.cmp(tmp_path / p, OUT_DIR / p, shallow=False)
        ]
        extra = [str(p) for p in committed if p not in fresh and p.name != "__pycache__"]
        if differ or extra:
            print("generated code is stale; run python scripts/gen_proto.py:", *differ, *extra, sep="\n  ")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
