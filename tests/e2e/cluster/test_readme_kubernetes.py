"""The Kubernetes walk-through, run as written on the real node: the bash blocks marked
``<!-- tested: tests/e2e/cluster/test_readme_kubernetes.py ... -->`` in README.md#on-kubernetes
(install with the bundled database, `helm test`, a labelled namespace, the SandboxClass and
MemoryWorkspace examples, the agent Pod that mounts the workspace's Secret, adds and searches)
and then in docs/operations/helm.md#uninstalling (the uninstall procedure), each line executed
by bash in the repository's root, in order, stopping at the first failure.

The image the README builds (localhost/memplane:dev) is the session's image under that tag too.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.e2e.cluster.podtools import IMAGE, REPO
from tests.fix_kube import KubeCluster

pytestmark = pytest.mark.timeout(1800)

MARKER = "<!-- tested: tests/e2e/cluster/test_readme_kubernetes.py"
README_IMAGE = "localhost/memplane:dev"  # what `scripts/image/build.sh` makes, as the README says
PAGES = ("README.md", "docs/operations/helm.md")  # the walk-through's order: install, then uninstall


def readme_blocks() -> list[str]:
    """The bash blocks that follow the marker, in the order of PAGES and of each page."""
    return [
        block
        for page in PAGES
        for block in re.findall(
            re.escape(MARKER) + r"[^\n]*\n```bash\n(.*?)```", (REPO / page).read_text(), flags=re.DOTALL
        )
    ]


def run_block(node: KubeCluster, block: str) -> str:
    done = subprocess.run(  # noqa: S603 (the block is our docs')
        ["bash", "-euo", "pipefail", "-c", block],  # noqa: S607 (bash from PATH)
        cwd=REPO,
        env=node.env(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, (
        f"README block failed ({done.returncode}):\n{block}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


def test_the_readme_walk_through_runs_as_written(node: KubeCluster) -> None:
    blocks = readme_blocks()
    assert len(blocks) == 2, "the install block and the uninstall block"
    env = (node.run_dir / "env").read_text()
    socket = re.search(r"^CONTAINERD_SOCK=(.*)$", env, flags=re.MULTILINE)
    assert socket is not None
    subprocess.run(  # noqa: S603 (ctr, fixed arguments)
        ["ctr", "-a", socket[1], "-n", "k8s.io", "images", "tag", "--force", IMAGE, README_IMAGE],  # noqa: S607
        check=True,
        capture_output=True,
    )
    try:
        out = run_block(node, blocks[0])
        found = [line for line in out.splitlines() if line.lstrip().startswith("1. ")]  # `memplane search`'s first hit
        assert found, out
        assert "The customer prefers email over phone calls" in found[0], out
        run_block(node, blocks[1])
        left = node.kubectl("get", "memoryworkspaces", "-A", "-o", "name").stdout.split()
        assert left == []
        assert node.kubectl("get", "namespace", "team-a", check=False).returncode != 0  # gone, not Terminating
    finally:
        node.helm("uninstall", "memplane", "-n", "memplane", "--no-hooks", check=False)
        for ns in ("team-a", "memplane"):  # the trial database's claim goes with its namespace
            node.kubectl("delete", "namespace", ns, "--ignore-not-found", "--timeout=180s", check=False, timeout=240)
