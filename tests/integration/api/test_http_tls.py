"""TLS on the HTTP port (gRPC-web and JSON) of the node and the gateway: the gRPC port's
certificate and key, checked by clients with the devnet's kind of throwaway CA; a plaintext
HTTP port is in the loud plaintext warning."""

from __future__ import annotations

import base64
import ssl
import struct
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from structlog.testing import capture_logs

from tests.conftest import Network, node_settings
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.payer_api import payer_api_pb2, payer_api_pb2_grpc
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.certs import CertAuthority, devnet_ca
from xnode.devtools.postgres import free_port
from xnode.gateway.server import start_gateway
from xnode.gateway.settings import GatewaySettings
from xnode.tls import ClientTls, open_channel

GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP
QUERY = "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes"
GRPC_WEB = {"Content-Type": "application/grpc-web+proto", "X-Grpc-Web": "1"}


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, Path]:
    directory = tmp_path / "tls"
    ca = devnet_ca(directory)
    node_cert, node_key = ca.issue_files(directory, "node")
    gateway_cert, gateway_key = ca.issue_files(directory, "gateway")
    return {
        "ca": directory / "ca.pem",
        "node_cert": node_cert,
        "node_key": node_key,
        "gateway_cert": gateway_cert,
        "gateway_key": gateway_key,
    }


def _grpc_web_frame(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


async def test_grpc_web_and_json_are_served_over_https_with_the_grpc_certificate(
    start_node: Any, database: str, node_spec: Any, certs: dict[str, Path]
) -> None:
    node = await start_node(
        **node_settings(database, node_spec),
        http_listen_address="127.0.0.1:0",
        tls_cert_file=certs["node_cert"],
        tls_key_file=certs["node_key"],
    )
    async with NodeClient(f"https://{node.address}", ClientTls.from_files(certs["ca"])) as grpc:
        await grpc.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a", b"b"])
    ca = ssl.create_default_context(cafile=str(certs["ca"]))
    base = f"https://{node.http_address}"
    query = api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[TOPIC]))
    async with aiohttp.ClientSession() as http:
        body = {"query": {"topics": [base64.b64encode(TOPIC).decode()]}}
        async with http.post(f"{base}/mls/v2/query-envelopes", json=body, ssl=ca) as answer:
            assert answer.status == 200
            assert len((await answer.json())["envelopes"]) == 2
        frame = _grpc_web_frame(query.SerializeToString())
        async with http.post(base + QUERY, data=frame, headers=GRPC_WEB, ssl=ca) as answer:
            assert answer.status == 200
            raw = await answer.read()
        (size,) = struct.unpack_from(">I", raw, 1)
        assert len(api.QueryEnvelopesResponse.FromString(raw[5 : 5 + size]).envelopes) == 2
        # Plain http to the TLS port gets nothing; an unknown CA fails the handshake.
        with pytest.raises(aiohttp.ClientError):
            await http.post(f"http://{node.http_address}/mls/v2/query-envelopes", json=body)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await http.post(f"{base}/mls/v2/query-envelopes", json=body)


async def test_a_plaintext_http_port_is_named_in_the_plaintext_warning(
    start_node: Any, database: str, node_spec: Any
) -> None:
    with capture_logs() as logs:
        node = await start_node(
            **node_settings(database, node_spec), http_listen_address="127.0.0.1:0"
        )
    warnings = [e for e in logs if e["event"] == "plaintext_listener"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    # As bound, like the gateway's warning: the port the system chose.
    assert warnings[0]["http"] == node.http_address != "127.0.0.1:0"


async def test_the_gateway_serves_tls_on_grpc_and_http(
    network: Network, certs: dict[str, Path]
) -> None:
    settings = GatewaySettings(
        listen_address=f"127.0.0.1:{free_port()}",
        http_listen_address="127.0.0.1:0",
        payer_key=SigningKey.generate().hex(),
        nodes_file=network.spec.nodes_file,
        registry_source="file",
        tls_cert_file=certs["gateway_cert"],
        tls_key_file=certs["gateway_key"],
    )
    with capture_logs() as logs:
        gateway = await start_gateway(settings)
    try:
        assert not [e for e in logs if e["event"] == "plaintext_listener"]
        ca = ssl.create_default_context(cafile=str(certs["ca"]))
        async with aiohttp.ClientSession() as http:
            url = f"https://{gateway.http_address}/mls/v2/payer/get-nodes"
            async with http.post(url, json={}, ssl=ca) as answer:
                assert answer.status == 200
                assert sorted((await answer.json())["nodes"]) == ["100", "200", "300"]
        tls = ClientTls.from_files(certs["ca"])
        async with open_channel(f"https://{gateway.address}", tls) as channel:
            payer = payer_api_pb2_grpc.PayerApiStub(channel)
            listed = await payer.GetNodes(payer_api_pb2.GetNodesRequest(), timeout=10)
            # Official clients read through the gateway, over TLS like everything else here.
            assert dict(listed.nodes) == {0: f"https://{gateway.address}"}
    finally:
        await gateway.stop()
    plain = settings.model_copy(
        update={"tls_cert_file": None, "tls_key_file": None, "listen_address": "127.0.0.1:0"}
    )
    with capture_logs() as logs:
        gateway = await start_gateway(plain)
    await gateway.stop()
    warnings = [e for e in logs if e["event"] == "plaintext_listener"]
    assert len(warnings) == 1 and warnings[0]["http"] == gateway.http_address


async def test_the_gateway_shows_its_client_certificate_to_nodes_that_require_one(
    start_node: Any, database: str, node_spec: Any, certs: dict[str, Path]
) -> None:
    """A node that requires client certificates serves the gateway given one
    (tls_client_cert_file), and refuses the same gateway without it."""
    node = node_requiring_client_certificates(database, node_spec, certs, certs["ca"])
    await start_holding_one_envelope(start_node, node, certs)
    settings = gateway_towards(node_spec, certs)
    for shown, update in (
        (True, {}),
        (False, {"tls_client_cert_file": None, "tls_client_key_file": None}),
    ):
        gateway = await start_gateway(settings.model_copy(update=update))
        try:
            async with NodeClient(gateway.address) as reader:
                if shown:
                    assert len(await reader.query(originators=[100])) == 1
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await reader.query(originators=[100])
                    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            await gateway.stop()


def node_requiring_client_certificates(
    database: str, node_spec: Any, certs: dict[str, Path], client_ca: Path
) -> dict[str, Any]:
    """Settings of node 100, the registry's only reachable node, over TLS, requiring client
    certificates of `client_ca`; the registry file is written."""
    address = f"127.0.0.1:{free_port()}"
    registry = Registry(
        NodeEntry(n, key.public_key, f"https://{address}" if n == 100 else "")
        for n, key in node_spec.keys.items()
    )
    node_spec.nodes_file.write_text(registry.to_json())
    return node_settings(database, node_spec, listen_address=address) | {
        "tls_cert_file": certs["node_cert"],
        "tls_key_file": certs["node_key"],
        "tls_client_ca_file": client_ca,
        "tls_client_cert": "require",
    }


async def start_holding_one_envelope(
    start_node: Any, settings: dict[str, Any], certs: dict[str, Path]
) -> Any:
    """The node started, with one envelope published to it (by a client it lets in)."""
    node = await start_node(**settings)
    url = f"https://{settings['listen_address']}"
    async with NodeClient(url, ClientTls.from_files(*certs_of(certs))) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"held"])
    return node


def gateway_towards(node_spec: Any, certs: dict[str, Path]) -> GatewaySettings:
    """A gateway of the node's registry, checking it against the CA, showing its client
    certificate."""
    return GatewaySettings(
        listen_address="127.0.0.1:0",
        payer_key=SigningKey.generate().hex(),
        nodes_file=node_spec.nodes_file,
        registry_source="file",
        tls_ca_file=certs["ca"],
        tls_client_cert_file=certs["gateway_cert"],
        tls_client_key_file=certs["gateway_key"],
        read_failover_seconds=1,
        # The node answers from this test's event loop: a busy machine is not a node down.
        node_check_timeout_seconds=10,
    )


def certs_of(certs: dict[str, Path]) -> tuple[Path, Path, Path]:
    """(CA, certificate, key) of a client the node lets in: the gateway's certificate."""
    return certs["ca"], certs["gateway_cert"], certs["gateway_key"]


async def test_the_gateway_shows_its_renewed_client_certificate_without_a_restart(
    start_node: Any, database: str, node_spec: Any, certs: dict[str, Path], tmp_path: Path
) -> None:
    """The CA of client certificates changes: the gateway's client certificate files are
    renewed from the new CA, and the node's client CA file names only the new CA. The node
    restarts (every connection to it is new): the gateway shows the renewed certificate,
    and its reads go on."""
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(certs["ca"].read_bytes())
    node = node_requiring_client_certificates(database, node_spec, certs, client_ca)
    first = await start_holding_one_envelope(start_node, node, certs)
    settings = gateway_towards(node_spec, certs)
    gateway = await start_gateway(settings)
    try:
        async with NodeClient(gateway.address) as reader:
            assert len(await reader.query(originators=[100])) == 1
            new_ca = CertAuthority.create("renewed CA")
            cert_pem, key_pem = new_ca.issue("gateway")
            certs["gateway_key"].write_bytes(key_pem)
            certs["gateway_cert"].write_bytes(cert_pem)
            client_ca.write_bytes(new_ca.pem)
            await first.stop()
            await start_node(**node)

            async def read() -> bool:
                try:
                    return len(await reader.query(originators=[100])) == 1
                except grpc.aio.AioRpcError:  # the gateway's reconnect backoff, at first
                    return False

            await eventually(read, 30, "a read through the renewed certificate")
    finally:
        await gateway.stop()
