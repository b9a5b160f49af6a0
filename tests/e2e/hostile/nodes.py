"""Starting the hostile-client suite's nodes as processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, Network, NodeProcess
from xnode.devtools.devnet import wait_serving


def start(
    spawn_node: Callable[..., NodeProcess], network: Network, by_node: dict[int, dict[str, str]]
) -> dict[int, NodeProcess]:
    """Starts each node with its settings, then waits until every one serves."""
    started = {}
    for node_id, extra in by_node.items():
        settings: dict[str, Any] = {**REPLICATION_TEST_SETTINGS, **extra}
        started[node_id] = spawn_node(
            network.dsns[node_id],
            network.spec,
            node_id,
            wait=False,
            listen_address=network.addresses[node_id],
            **{k: str(v) for k, v in settings.items()},
        )
    for node_id, node in started.items():
        if not wait_serving(network.addresses[node_id], 60):
            pytest.fail(f"node {node_id} did not start:\n{node.output()[-3000:]}")
    return started
