"""`xnode devnet`: a replicating network with anvil in one command; Ctrl-C loses nothing."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from tests.e2e.replication.conftest import eventually
from xmtp.xmtpv4.payer_api import payer_api_pb2, payer_api_pb2_grpc
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port

GROUP = bytes([9]) * 16


def start_devnet(
    state: Path, base_port: int, *extra: str
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    state.mkdir(exist_ok=True)
    described = state / "devnet.json"
    described.unlink(missing_ok=True)
    log = (state.parent / "devnet.out").open("ab")
    command = ["devnet", "--nodes", "2", "--dir", str(state), "--base-port", str(base_port), *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "xnode.cli", *command],
        stdout=log,
        stderr=log,
        start_new_session=True,
        env={**os.environ, "XNODE_LOG_FORMAT": "json"},
    )
    deadline = time.monotonic() + 120
    while not described.exists():
        assert proc.poll() is None, (state.parent / "devnet.out").read_text()[-3000:]
        assert time.monotonic() < deadline, "devnet did not come up in time"
        time.sleep(0.2)
    return proc, json.loads(described.read_text())


def interrupt(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    return proc.wait(90)


async def count_on(address: str) -> int:
    async with NodeClient(address) as client:
        return len(await client.query(topics=[b"\x00" + GROUP]))


async def gateway_nodes(address: str) -> dict[int, str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = payer_api_pb2_grpc.PayerApiStub(channel)  # type: ignore[no-untyped-call]
        reply = await stub.GetNodes(payer_api_pb2.GetNodesRequest(), timeout=10)
    return dict(reply.nodes)


@pytest.fixture
def state() -> Iterator[Path]:
    """Outside pytest's private tmp: Postgres runs as `postgres` when we are root."""
    root = Path(tempfile.mkdtemp(prefix="xnode-devnet-"))
    root.chmod(0o755)
    yield root / "state"
    shutil.rmtree(root, ignore_errors=True)


async def test_devnet_replicates_and_ctrl_c_loses_nothing(state: Path) -> None:
    base = free_port()
    proc, first = start_devnet(state, base)
    try:
        nodes = {n["node_id"]: n for n in first["nodes"]}
        assert sorted(nodes) == [100, 200]
        assert first["chain"]["node_registry"].startswith("0x")
        async with NodeClient(nodes[100]["address"]) as client:
            await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a", b"b"])

        async def replicated() -> bool:
            return await count_on(nodes[200]["address"]) == 2

        await eventually(replicated)
        # The devnet's gateway lists the nodes for clients (PayerApi/GetNodes).
        assert await gateway_nodes(first["gateway"]["address"]) == {
            n: f"http://{nodes[n]['address']}" for n in nodes
        }
        # gRPC-web and JSON are on in the devnet, at the addresses devnet.json gives.
        query = {"query": {"topics": [base64.b64encode(b"\x00" + GROUP).decode()]}}
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://{nodes[200]['http']}/mls/v2/query-envelopes", json=query
            ) as r:
                assert len((await r.json())["envelopes"]) == 2
            async with http.post(first["gateway"]["http"] + "/mls/v2/payer/get-nodes") as r:
                # Over HTTP, the nodes' gRPC-web ports: what a browser can reach.
                assert (await r.json())["nodes"] == {
                    str(n): f"http://{nodes[n]['http']}" for n in nodes
                }
    finally:
        code = interrupt(proc)
    assert code == 0
    assert (state / "anvil-state.json").exists()

    proc, second = start_devnet(state, base)
    try:
        assert second["chain"]["node_registry"] == first["chain"]["node_registry"]
        assert [n["address"] for n in second["nodes"]] == [n["address"] for n in first["nodes"]]
        assert await count_on(second["nodes"][1]["address"]) == 2
    finally:
        assert interrupt(proc) == 0
