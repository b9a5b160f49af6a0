"""`xnode publish` and `xnode query` go through xnode.client: with a registry, a topic whose
preferred node is down is published to the next one, and what comes back is checked."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from tests.conftest import Network

GROUP = "51" * 16


async def xnode(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "xnode.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )


async def test_publish_and_query_with_a_registry_fail_over_to_the_live_node(
    start_node: Any, network: Network
) -> None:
    await start_node(**network.settings(100))  # 200 and 300 are in the registry, not running
    registry = str(network.spec.nodes_file)
    common = ["--registry", registry, "--group-id", GROUP, "--json", "--deadline", "30"]
    published = await xnode("publish", *common, "--count", "2")
    assert published.returncode == 0, published.stderr
    lines = [json.loads(line) for line in published.stdout.splitlines()]
    assert [e["originator"] for e in lines] == [100, 100]
    found = await xnode("query", *common)
    assert found.returncode == 0, found.stderr
    assert [json.loads(line)["sequence_id"] for line in found.stdout.splitlines()] == [
        e["sequence_id"] for e in lines
    ]
    assert "refused" not in found.stderr


async def test_a_node_by_address_alone_is_read_without_registry_keys(
    start_node: Any, network: Network
) -> None:
    node = await start_node(**network.settings(100))
    common = ["--node", node.address, "--group-id", GROUP]
    assert (await xnode("publish", *common, "--node-id", "100")).returncode == 0
    found = await xnode("query", *common)
    assert found.returncode == 0 and len(found.stdout.splitlines()) == 1, found.stderr
    assert "not checked against registry keys" in found.stderr
    refused = await xnode("publish", *common)
    assert refused.returncode == 2 and "--node-id" in refused.stderr
