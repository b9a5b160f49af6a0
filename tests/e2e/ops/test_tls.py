"""TLS between `xnode run` processes (XIP-49 3.2.3): a network whose registry says https://
converges over TLS; a peer with a certificate of another CA is refused; a plaintext client
is told clearly that the port speaks TLS."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPLICATION_TEST_SETTINGS, NodeProcess, NodeSpec
from tests.e2e.replication.test_devnet import interrupt, start_devnet
from tests.support.waiting import eventually
from xmtp.xmtpv4.payer_api import payer_api_pb2, payer_api_pb2_grpc
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.certs import CertAuthority
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import free_port
from xnode.tls import ClientTls, open_channel

PAYER = SigningKey.generate()
GROUP = b"\x51" * 16
TOPIC = b"\x00" + GROUP
ROGUE = 300  # its certificate comes from another CA


@dataclass
class TlsNetwork:
    directory: Path
    ca: CertAuthority
    rogue_ca: CertAuthority
    spec: NodeSpec
    addresses: dict[int, str]
    metrics: dict[int, str]
    dsns: dict[int, str]
    spawn: Callable[..., NodeProcess]
    processes: dict[int, NodeProcess]

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    def url(self, node_id: int) -> str:
        return f"https://{self.addresses[node_id]}"

    def client_tls(self, node_id: int) -> ClientTls:
        """Trusts the CA that signed `node_id`'s certificate; shows the client certificate
        the nodes require (from the network's CA)."""
        cert_file = self.directory / "client.pem"
        key_file = self.directory / "client.key"
        ca = self.rogue_ca if node_id == ROGUE else self.ca
        return ClientTls(ca.pem, key_file.read_bytes(), cert_file.read_bytes())

    def start(self, node_id: int, client: ClientTls | None = None) -> None:
        """`client`: what the test calls it with once it serves (default: client_tls)."""
        issuer = self.rogue_ca if node_id == ROGUE else self.ca
        cert_file, key_file = issuer.issue_files(self.directory, f"node-{node_id}")
        settings = {
            **REPLICATION_TEST_SETTINGS,
            "listen_address": self.addresses[node_id],
            "metrics_address": self.metrics[node_id],
            "tls_cert_file": cert_file,
            "tls_key_file": key_file,
            "tls_client_ca_file": self.ca_file,
            "tls_client_cert": "require",
            "tls_peer_ca_file": self.ca_file,
        }
        self.processes[node_id] = self.spawn(
            self.dsns[node_id],
            self.spec,
            node_id,
            wait=False,
            **{k: str(v) for k, v in settings.items()},
        )
        if not wait_serving(self.url(node_id), 60, client or self.client_tls(node_id)):
            pytest.fail(f"node {node_id} did not serve:\n{self.processes[node_id].output()}")

    async def originated_by(
        self, node_id: int, originator: int, tls: ClientTls | None = None
    ) -> list[bytes]:
        async with NodeClient(self.url(node_id), tls or self.client_tls(node_id)) as client:
            found = await client.query(originators=[originator])
        return [e.SerializeToString() for e in found]

    def scrape(self, node_id: int) -> str:
        """node_id's metrics, over the metrics port's TLS (with the client certificate it
        requires)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(self.directory / "client.pem", self.directory / "client.key")
        url = f"https://{self.metrics[node_id]}/metrics"
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return str(response.read().decode())

    def reconnects(self, node_id: int, peer: int) -> float:
        """xnode_replication_stream_reconnects_total of node_id's streams from `peer`."""
        text = self.scrape(node_id)
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("xnode_replication_stream_reconnects_total{")
            and f'peer="{peer}"' in line
        )


@pytest.fixture
def tls_network(
    node_spec: NodeSpec,
    new_database: Callable[[], str],
    spawn_node: Callable[..., NodeProcess],
    tmp_path: Path,
) -> TlsNetwork:
    """Nodes 100, 200, 300 registered at https:// addresses, all trusting one CA and
    requiring client certificates of it; node 300's own certificate is from another CA.
    None started."""
    ca, rogue = CertAuthority.create("xnode test CA"), CertAuthority.create("rogue CA")
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    ca.issue_files(tmp_path, "client")
    addresses = {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys}
    registry = Registry(
        NodeEntry(n, key.public_key, f"https://{addresses[n]}") for n, key in node_spec.keys.items()
    )
    node_spec.nodes_file.write_text(registry.to_json())
    return TlsNetwork(
        tmp_path,
        ca,
        rogue,
        node_spec,
        addresses,
        {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys},
        {n: new_database() for n in node_spec.keys},
        spawn_node,
        {},
    )


async def test_tls_network_converges_and_refuses_a_peer_of_another_ca(
    tls_network: TlsNetwork,
) -> None:
    for node_id in (100, 200, ROGUE):
        tls_network.start(node_id)
    for node_id in (100, ROGUE):
        async with NodeClient(tls_network.url(node_id), tls_network.client_tls(node_id)) as c:
            await c.publish_group_messages(
                PAYER, node_id, GROUP, [b"%d-%d" % (node_id, i) for i in range(5)]
            )
    sent = await tls_network.originated_by(100, 100)
    assert len(sent) == 5

    async def replicated_over_tls() -> bool:
        return await tls_network.originated_by(200, 100) == sent

    await eventually(replicated_over_tls)

    def tls_refusals(node_id: int) -> int:
        return tls_network.processes[node_id].output().count('"peer_tls_refused"')

    async def both_refused() -> bool:
        return all(tls_refusals(n) for n in (100, 200))

    await eventually(both_refused)
    refused_at = tls_network.reconnects(100, ROGUE)

    async def refused_again_and_again() -> bool:
        return tls_network.reconnects(100, ROGUE) >= refused_at + 3

    await eventually(refused_again_and_again)
    for node_id in (100, 200):
        assert await tls_network.originated_by(node_id, ROGUE) == [], "nothing from the rogue"
        assert tls_refusals(node_id) == 1, "logged once, not at every reconnect"
    assert tls_network.processes[100].output().count('"plaintext_listener"') == 0


async def test_a_plaintext_client_against_the_tls_port_fails_clearly(
    tls_network: TlsNetwork,
) -> None:
    tls_network.start(100)
    address = tls_network.addresses[100]
    started = time.monotonic()
    async with NodeClient(address) as plaintext:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await plaintext.publish_group_messages(PAYER, 100, GROUP, [b"x"])
    assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 10, "fails at once, not at the deadline"
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "xnode.cli", "query", "--node", address],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert done.returncode == 1
    assert "UNAVAILABLE" in done.stderr and "https://" in done.stderr, done.stderr
    # Without the client certificate the node requires, TLS alone does not get in either.
    async with NodeClient(tls_network.url(100), ClientTls(tls_network.ca.pem)) as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await anonymous.query(originators=[100])
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


def test_plaintext_is_logged_loudly_once(spawn_node: Any, database: str, node_spec: Any) -> None:
    node = spawn_node(database, node_spec)
    assert node.output().count('"plaintext_listener"') == 1


@pytest.fixture
def devnet_state() -> Iterator[Path]:
    """Outside pytest's private tmp: Postgres runs as `postgres` when we are root."""
    root = Path(tempfile.mkdtemp(prefix="xnode-devnet-tls-"))
    root.chmod(0o755)
    yield root / "state"
    shutil.rmtree(root, ignore_errors=True)


async def _count_is(url: str, tls: ClientTls, count: int) -> bool:
    async with NodeClient(url, tls) as client:
        return len(await client.query(topics=[TOPIC])) == count


async def test_devnet_tls_runs_the_network_over_tls(devnet_state: Path) -> None:
    proc, described = start_devnet(devnet_state, free_port(), "--tls")
    try:
        nodes = {n["node_id"]: n for n in described["nodes"]}
        assert all(n["url"].startswith("https://127.0.0.1:") for n in nodes.values())
        tls = ClientTls.from_files(described["tls_ca_file"])
        async with NodeClient(nodes[100]["url"], tls) as client:
            await client.publish_group_messages(PAYER, 100, GROUP, [b"a", b"b"])

        async def replicated() -> bool:
            async with NodeClient(nodes[200]["url"], tls) as client:
                return len(await client.query(topics=[TOPIC])) == 2

        await eventually(replicated)
        # The gateway serves TLS too (a certificate of the devnet's CA) and reaches the
        # nodes over TLS with the CA.
        assert described["gateway"]["url"].startswith("https://")
        async with open_channel(described["gateway"]["url"], tls) as channel:
            payer = payer_api_pb2_grpc.PayerApiStub(channel)
            answer = await payer.PublishClientEnvelopes(
                payer_api_pb2.PublishClientEnvelopesRequest(
                    envelopes=[group_message_envelope(GROUP, b"via the gateway")]
                )
            )
        assert len(answer.originator_envelopes) == 1
        await eventually(lambda: _count_is(nodes[200]["url"], tls, 3))
        command = ["query", "--node", nodes[200]["url"], "--ca-file", described["tls_ca_file"]]
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "xnode.cli", *command, "--group-id", GROUP.hex()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and len(done.stdout.splitlines()) == 3, done.stderr
        log = (devnet_state / "node-200.log").read_text()
        assert "plaintext_listener" not in log
        # gRPC-web and JSON are https with the same certificates, checked with the same CA.
        ca = ssl.create_default_context(cafile=described["tls_ca_file"])
        async with aiohttp.ClientSession() as http:
            query = {"query": {"topics": [base64.b64encode(TOPIC).decode()]}}
            url = f"https://{nodes[200]['http']}/mls/v2/query-envelopes"
            async with http.post(url, json=query, ssl=ca) as reply:
                assert reply.status == 200 and len((await reply.json())["envelopes"]) == 3
            url = described["gateway"]["http"] + "/mls/v2/payer/get-nodes"
            assert url.startswith("https://")
            async with http.post(url, json={}, ssl=ca) as reply:
                listed = (await reply.json())["nodes"]
            assert all(u.startswith("https://") for u in listed.values()), listed
        assert "plaintext_listener" not in (devnet_state / "gateway.log").read_text()
    finally:
        assert interrupt(proc) == 0


def test_health_answers_for_a_tls_node_that_requires_client_certificates(
    tls_network: TlsNetwork,
) -> None:
    """`xnode health` (the image's HEALTHCHECK) with the node's own settings: TLS under the
    certificate's name, the node's certificate shown as the client's; 1 once it stopped."""
    tls_network.start(100)
    directory = tls_network.directory
    env = {
        **os.environ,
        "XNODE_LISTEN_ADDRESS": tls_network.addresses[100],
        "XNODE_TLS_CERT_FILE": str(directory / "node-100.pem"),
        "XNODE_TLS_KEY_FILE": str(directory / "node-100.key"),
        "XNODE_TLS_CLIENT_CA_FILE": str(tls_network.ca_file),
        "XNODE_TLS_CLIENT_CERT": "require",
        "XNODE_TLS_PEER_CA_FILE": str(tls_network.ca_file),
    }

    def health() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "xnode.cli", "health"]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)

    serving = health()
    assert (serving.returncode, serving.stdout.strip()) == (
        0,
        f"{tls_network.addresses[100]}: SERVING",
    ), serving.stderr
    assert tls_network.processes[100].terminate() == 0
    stopped = health()
    assert stopped.returncode == 1 and "UNAVAILABLE" in stopped.stdout, stopped.stdout


def served_certificate(address: str, tls_network: TlsNetwork, alpn: str | None) -> bytes:
    """The certificate (DER) a TLS port of the node shows to a new connection."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(tls_network.ca_file))
    context.load_cert_chain(
        tls_network.directory / "client.pem", tls_network.directory / "client.key"
    )
    if alpn is not None:
        context.set_alpn_protocols([alpn])
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def test_a_renewed_certificate_is_served_without_a_restart_and_no_call_fails(
    tls_network: TlsNetwork,
) -> None:
    """The files are overwritten (the certificate first, its key a moment later) while
    clients call on open connections and on new ones: every call succeeds, and new
    connections of the gRPC and metrics ports get the renewed certificate."""
    tls_network.start(100)
    cert_file = tls_network.directory / "node-100.pem"
    key_file = tls_network.directory / "node-100.key"
    old = x509.load_pem_x509_certificate(cert_file.read_bytes()).public_bytes(Encoding.DER)
    ports = {
        "gRPC": (tls_network.addresses[100], "h2"),
        "metrics": (tls_network.metrics[100], None),
    }
    for address, alpn in ports.values():
        assert served_certificate(address, tls_network, alpn) == old
    url, tls = tls_network.url(100), tls_network.client_tls(100)
    calls, renewed = 0, asyncio.Event()

    async def calling_on_one_connection() -> None:
        nonlocal calls
        async with NodeClient(url, tls) as client:
            while not renewed.is_set():
                await client.query(originators=[100])
                calls += 1

    async def calling_on_new_connections() -> None:
        nonlocal calls
        while not renewed.is_set():
            async with NodeClient(url, tls) as client:
                payload = f"during renewal {calls}".encode()  # each its own: no replay
                await client.publish_group_messages(PAYER, 100, GROUP, [payload])
            calls += 1

    async def renew() -> None:
        await eventually(lambda: calls >= 10)
        cert_pem, key_pem = tls_network.ca.issue("node-100")
        cert_file.write_bytes(cert_pem)
        await asyncio.sleep(0.2)  # a renewal written file by file: a moment of mismatch
        key_file.write_bytes(key_pem)
        new = x509.load_pem_x509_certificate(cert_pem).public_bytes(Encoding.DER)

        async def served_everywhere() -> bool:
            served = [
                await asyncio.to_thread(served_certificate, address, tls_network, alpn)
                for address, alpn in ports.values()
            ]
            return served == [new, new]

        await eventually(served_everywhere)
        at = calls
        await eventually(lambda: calls >= at + 10)
        renewed.set()

    await asyncio.gather(calling_on_one_connection(), calling_on_new_connections(), renew())
    output = tls_network.processes[100].output()
    assert '"tls_reloaded"' in output
    expiry = x509.load_pem_x509_certificate(cert_file.read_bytes()).not_valid_after_utc
    [served] = [
        sample.value
        for family in text_string_to_metric_families(tls_network.scrape(100))
        for sample in family.samples
        if sample.name == "xnode_tls_certificate_expiry_timestamp_seconds"
    ]
    assert served == expiry.timestamp()


def replace_file(path: Path, content: bytes) -> None:
    """As a renewal tool writes: a new file moved over the old one."""
    partial = path.with_name(path.name + ".new")
    partial.write_bytes(content)
    os.replace(partial, path)


async def test_a_renewed_certificate_is_shown_to_peers_as_a_client_without_a_restart(
    tls_network: TlsNetwork,
) -> None:
    """Node 100 replicates from node 200, which requires a client certificate. The CA
    changes: node 100's certificate is renewed from the new CA, and every node's client CA
    file names only the new CA. Node 200 restarts, so node 100 connects again: it shows the
    renewed certificate (the old one would be refused) and goes on replicating."""
    tls_network.start(100)
    tls_network.start(200)
    async with NodeClient(tls_network.url(200), tls_network.client_tls(200)) as client:
        await client.publish_group_messages(PAYER, 200, GROUP, [b"before the renewal"])

    async def replicated(count: int, tls: ClientTls | None = None) -> bool:
        return len(await tls_network.originated_by(100, 200, tls)) == count

    await eventually(lambda: replicated(1))

    new_ca = CertAuthority.create("renewed CA")
    cert_pem, key_pem = new_ca.issue("node-100")
    replace_file(tls_network.directory / "node-100.key", key_pem)
    replace_file(tls_network.directory / "node-100.pem", cert_pem)
    replace_file(tls_network.ca_file, new_ca.pem)  # client certificates of the new CA only
    client_pem, client_key = new_ca.issue("client")
    # Node 200 keeps a certificate of the first CA, which node 100 checks peers against.
    towards_200 = ClientTls(tls_network.ca.pem, client_key, client_pem)
    towards_100 = ClientTls(new_ca.pem, client_key, client_pem)

    tls_network.processes.pop(200).kill()
    tls_network.start(200, client=towards_200)
    async with NodeClient(tls_network.url(200), towards_200) as client:
        await client.publish_group_messages(PAYER, 200, GROUP, [b"after the renewal"])
    await eventually(lambda: replicated(2, towards_100))
    assert '"tls_reloaded"' in tls_network.processes[100].output()
