"""Size of `pip install memplane` (the client) against `pip install 'memplane[mcp]'` (the client and
the MCP server) and `pip install 'memplane[server]'`:
the wheel built from this tree, then each installed into a fresh venv with the pip that
ships with this Python; prints the wheel's bytes and each venv's site-packages bytes
(pip and setuptools, the same in both, left out).

    python bench/install_size.py        # ~3 min: the server's wheels come through pip's cache
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = ("pip", "setuptools", "_distutils_hack", "distutils-precedence.pth")


def _run(*args: str | Path) -> None:
    subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True)  # noqa: S603


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def installed_bytes(wheel: Path, extra: str, work: Path) -> tuple[int, int]:
    """(site-packages bytes without pip/setuptools, number of distributions) of a fresh
    venv after `pip install <wheel>[extra]`."""
    venv = work / (extra or "bare")
    _run(sys.executable, "-m", "venv", venv)
    requirement = f"memplane[{extra}] @ {wheel.as_uri()}" if extra else str(wheel)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", requirement)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    total = sum(
        _tree_bytes(p) if p.is_dir() else p.stat().st_size
        for p in site.iterdir()
        if not p.name.startswith(BASELINE) and p.name != "__pycache__"
    )
    return total, len(list(site.glob("*.dist-info"))) - 2  # less pip's and setuptools'


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="memplane-size-") as tmp:
        work = Path(tmp)
        _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", work, REPO)
        (wheel,) = work.glob("memplane-*.whl")
        print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB")
        for extra in ("", "mcp", "server"):
            size, count = installed_bytes(wheel, extra, work)
            label = f"memplane[{extra}]" if extra else "memplane"
            print(f"{label:<18} installed: {size / 1e6:8.1f} MB in {count} distributions")


if __name__ == "__main__":
    main()
