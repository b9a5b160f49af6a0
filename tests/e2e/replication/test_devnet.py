"""`xnode devnet`: a replicating network with anvil in one command; Ctrl-C loses nothing."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from web3 import Web3

from tests.e2e.ops.test_restore import log_of
from tests.integration.chain.helpers import (
    canonical_payloads,
    client_bytes,
    commit_envelope,
    group_topic,
    inbox_topic,
    publish,
    signed_update_envelope,
)
from tests.support.identity_signers import Inbox
from tests.support.waiting import eventually
from xmtp.xmtpv4.payer_api import payer_api_pb2, payer_api_pb2_grpc
from xnode.chain import abi
from xnode.chain.contracts import NODE_REGISTRY, contract_at
from xnode.chain.deployment import load_contracts_file
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.originator_selection import failover_order
from xnode.core.registry import NodeEntry
from xnode.core.topics import Topic, TopicKind
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import free_port
from xnode.devtools.processes import child_pids

GROUP = bytes([9]) * 16
ALICES_INBOX = Inbox()


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
    assert described.stat().st_mode & 0o777 == 0o600, "devnet.json holds every private key"
    return proc, json.loads(described.read_text())


def interrupt(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    return proc.wait(90)


async def count_on(address: str) -> int:
    async with NodeClient(address) as client:
        return len(await client.query(topics=[b"\x00" + GROUP]))


async def gateway_nodes(address: str) -> dict[int, str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = payer_api_pb2_grpc.PayerApiStub(channel)
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
        # The devnet's gateway names itself for reads (PayerApi/GetNodes): it reads from the
        # nodes with failover (docs/gateway.md).
        gateway = first["gateway"]["address"]
        assert await gateway_nodes(gateway) == {0: f"http://{gateway}"}
        # gRPC-web and JSON are on in the devnet, at the addresses devnet.json gives.
        query = {"query": {"topics": [base64.b64encode(b"\x00" + GROUP).decode()]}}
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://{nodes[200]['http']}/mls/v2/query-envelopes", json=query
            ) as r:
                assert len((await r.json())["envelopes"]) == 2
            gateway_http = first["gateway"]["http"]
            async with http.post(gateway_http + "/mls/v2/payer/get-nodes") as r:
                # Over HTTP, the gateway's own gRPC-web port, which reads with failover.
                assert (await r.json())["nodes"] == {"0": gateway_http}
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


async def test_devnet_ha_puts_node_100_on_patroni(state: Path) -> None:
    """`xnode devnet --ha`: node 100's database is a Patroni primary with a synchronous
    standby, reached by a DSN naming both; publishes are stored on both and replicated."""
    proc, described = start_devnet(state, free_port(), "--ha")
    try:
        members = described["ha"]["members"]
        assert sorted(members) == ["pg-a", "pg-b"]
        nodes = {n["node_id"]: n for n in described["nodes"]}
        hosts = ",".join(m["postgres"] for m in members.values())
        assert nodes[100]["dsn"] == (
            f"postgresql://postgres@{hosts}/xnode_100?target_session_attrs=read-write"
        )
        cluster = json.loads(await asyncio.to_thread(_get, members["pg-a"]["rest"] + "/cluster"))
        assert sorted(m["role"] for m in cluster["members"]) == ["leader", "sync_standby"]
        async with NodeClient(nodes[100]["address"]) as client:
            await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a", b"b"])

        async def everywhere() -> bool:
            on_members = [
                len(await log_of(f"postgresql://postgres@{m['postgres']}/xnode_100", 100))
                for m in members.values()
            ]
            return on_members == [2, 2] and await count_on(nodes[200]["address"]) == 2

        await eventually(everywhere, what="both members and node 200 holding the publishes")
    finally:
        assert interrupt(proc) == 0
    for member in members.values():  # Ctrl-C stopped Patroni too
        with pytest.raises(OSError):
            await asyncio.to_thread(_get, member["rest"] + "/health")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as reply:
        body: bytes = reply.read()
    return body


def _registered(url: str, contracts_file: str) -> list[int]:
    """Node ids in the NodeRegistry that `contracts_file` names on the chain at `url`."""
    contracts = load_contracts_file(Path(contracts_file))
    registry = contract_at(Web3(Web3.HTTPProvider(url)), NODE_REGISTRY, contracts.node_registry)
    return sorted(int(n[0]) for n in registry.functions.allNodes().call())


def _message_events(url: str, contracts_file: str) -> int:
    contracts = load_contracts_file(Path(contracts_file))
    return sum(
        len(canonical_payloads(url, address, topic))
        for address, topic in (
            (contracts.group_messages, abi.MESSAGE_SENT),
            (contracts.identity_updates, abi.IDENTITY_UPDATE_CREATED),
        )
    )


async def _topics_on(address: str) -> list[bytes]:
    async with NodeClient(address) as client:
        found = await client.query(topics=[group_topic(GROUP), inbox_topic(ALICES_INBOX.key)])
    return sorted(client_bytes(e) for e in found)


async def test_a_read_only_node_converges_and_the_registry_lives_on_its_own_chain(
    state: Path,
) -> None:
    """Issue 12, parts 4 and 5: `--read-only-nodes 1 --two-chains`."""
    proc, described = start_devnet(state, free_port(), "--read-only-nodes", "1", "--two-chains")
    try:
        nodes = {n["node_id"]: n["address"] for n in described["nodes"]}
        [reader] = [n["address"] for n in described["read_only_nodes"]]
        app, registry = described["chain"], described["chain"]["registry_chain"]
        assert (app["chain_id"], registry["chain_id"]) == (31337, 31338)
        # Nodes registered on the registry chain only; the app chain's registry is unused.
        assert _registered(registry["rpc_url"], registry["contracts_file"]) == [100, 200]
        assert _registered(app["rpc_url"], app["contracts_file"]) == []

        async with NodeClient(reader) as client:
            live = client.subscribe(topics=[group_topic(GROUP)])
            async with NodeClient(nodes[100]) as first, NodeClient(nodes[200]) as second:
                await first.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a"])
                await publish(first, 100, [commit_envelope(GROUP)])
                await publish(second, 200, [signed_update_envelope(ALICES_INBOX.create())])
            # The read-only node's subscription delivers what node 100 originated.
            async with asyncio.timeout(60):
                async for response in live:
                    if response.envelopes:
                        break
            live.cancel()
        # Commits and identity updates went to the app chain's payload contracts.
        assert _message_events(app["rpc_url"], app["contracts_file"]) == 2
        assert _message_events(registry["rpc_url"], registry["contracts_file"]) == 0

        # Node 100 indexes node 200's identity update from the chain a moment later.
        async def all_three_on_100() -> bool:
            return len(await _topics_on(nodes[100])) == 3

        await eventually(all_three_on_100)
        expected = await _topics_on(nodes[100])

        async def converged() -> bool:
            return all([await _topics_on(a) == expected for a in (nodes[200], reader)])

        await eventually(converged)

        async with NodeClient(reader) as client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.publish_group_messages(SigningKey.generate(), 0, GROUP, [b"x"])
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "read-only node" in (refused.value.details() or "")
        log = (state / "read-only-1.log").read_text()
        assert "misbehavior_reported" not in log  # it files no reports of its own
    finally:
        assert interrupt(proc) == 0


def node_pid(devnet: subprocess.Popen[bytes], name: str) -> int | None:
    """The pid of the devnet's process for `name` (node-200), found by its key file."""
    for pid in child_pids(devnet.pid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # ended meanwhile
        if any(v.endswith(f"/{name}.key".encode()) for v in environ):
            return pid
    return None


async def publish_through(gateway: NodeClient, group: bytes, message: bytes) -> None:
    """One group message published through the gateway's PayerApi, which signs it as payer."""
    publish = gateway.channel.unary_unary(
        "/xmtp.xmtpv4.payer_api.PayerApi/PublishClientEnvelopes",
        request_serializer=payer_api_pb2.PublishClientEnvelopesRequest.SerializeToString,
        response_deserializer=payer_api_pb2.PublishClientEnvelopesResponse.FromString,
    )
    envelope = group_message_envelope(group, message)
    await publish(payer_api_pb2.PublishClientEnvelopesRequest(envelopes=[envelope]), timeout=30)


def group_preferring(node_id: int, nodes: list[dict[str, Any]]) -> bytes:
    """A group whose topic prefers `node_id` (XIP-49 3.3.6): the gateway would send its
    publishes there first."""
    entries = [NodeEntry(n["node_id"], bytes.fromhex(n["public_key"][2:]), n["url"]) for n in nodes]
    for i in range(1000):
        group = i.to_bytes(16, "big")
        if failover_order(Topic(TopicKind.GROUP_MESSAGES, group).raw, entries)[0] == node_id:
            return group
    raise AssertionError(f"no group prefers node {node_id}")


async def test_a_killed_node_comes_back_while_the_others_serve_through_the_gateway(
    state: Path,
) -> None:
    """Issue 36, part 6: SIGKILL node 200; publishes and reads through the gateway go on
    succeeding until the devnet has started it again, and then it serves and has caught up.
    The gateway, killed, is started again too."""
    proc, described = start_devnet(state, free_port())
    try:
        node_200 = next(n for n in described["nodes"] if n["node_id"] == 200)
        group = group_preferring(200, described["nodes"])
        topic = Topic(TopicKind.GROUP_MESSAGES, group).raw
        killed = node_pid(proc, "node-200")
        assert killed is not None
        os.kill(killed, signal.SIGKILL)

        published = 0
        async with NodeClient(described["gateway"]["address"]) as gateway:

            async def back() -> bool:
                """One publish and one read through the gateway, both succeeding, then
                whether node 200 is serving again from a new process."""
                nonlocal published
                await publish_through(gateway, group, f"while down {published}".encode())
                published += 1
                read = len(await gateway.query(topics=[topic]))
                if node_pid(proc, "node-200") in (None, killed):
                    # Node 200 was down throughout: node 100 stored and served them all.
                    assert read == published
                    reads_while_down.append(read)
                    return False
                return await asyncio.to_thread(wait_serving, node_200["address"], 0.5)

            reads_while_down: list[int] = []
            await eventually(back, 120, "node 200 serving again")
        assert reads_while_down, "the gateway served while node 200 was down"

        async def caught_up() -> bool:
            async with NodeClient(node_200["address"]) as client:
                return len(await client.query(topics=[topic])) == published

        await eventually(caught_up, what="node 200 holding what was published while it was down")

        # The gateway too: killed, it is started again on its address and takes publishes.
        gateway_pid = node_pid(proc, "gateway")
        assert gateway_pid is not None
        os.kill(gateway_pid, signal.SIGKILL)

        async def gateway_back() -> bool:
            if node_pid(proc, "gateway") in (None, gateway_pid):
                return False
            return await asyncio.to_thread(wait_serving, described["gateway"]["address"], 0.5)

        await eventually(gateway_back, 120, "the gateway serving again")
        async with NodeClient(described["gateway"]["address"]) as gateway:
            await publish_through(gateway, group, b"after the gateway came back")
            assert len(await gateway.query(topics=[topic])) == published + 1
    finally:
        assert interrupt(proc) == 0
    said = (state.parent / "devnet.out").read_text()
    assert f"node-200 killed by SIGKILL; its log: {state / 'node-200.log'}" in said
    assert "node-200 started again" in said
    assert f"gateway killed by SIGKILL; its log: {state / 'gateway.log'}" in said
