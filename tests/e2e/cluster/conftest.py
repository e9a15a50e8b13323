"""The cluster tier's node: one real one-node cluster for this package (tests/fix_node.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fix_kube import KubeCluster, resolved_bin_dir
from tests.fix_node import real_node, resolved_node_bin


@pytest.fixture(scope="package")
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A real one-node cluster (kubelet, containerd, kube-proxy, CoreDNS, kube-router's firewall)
    with the memplane image imported: Ready ~20-40 s after the call. Its kubeconfig is the
    admin's (system:masters). Stopped, every host change undone, once this package's tests are
    done. Fails (never skips) if the node cannot be built, started or made Ready."""
    with real_node(
        resolved_bin_dir(request.config), resolved_node_bin(request.config), tmp_path_factory.mktemp("node")
    ) as cluster:
        yield cluster
