"""`xnode watchdog` alone (as a client), one round against a real node 100 on anvil and
Postgres, a misbehaving node 200 that serves a doctored chain payload, and node 300 down:
the two are reported where they can be checked (node 100 re-checks the chain claim), node
100 is not reported at all.

Withholding: node 500, the scripted withholder (xnode.devtools.byzantine), serves its own
log with a committed id skipped. As a client, the watchdog submits the WITHHOLDING its
signed holdings prove; as a node, it files a WITHHOLDING_ACCUSATION when 500 signs no
holdings past the patience (a client files none: nodes refuse them from clients)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.api.test_misbehavior_evidence import resigned, taken
from tests.integration.chain.helpers import commit_envelope, publish
from tests.integration.replication.test_withholding import (
    Reports,
    _reports,
    beside_withholder,
    extension,
    proves_withholding,
    streamed_then_withheld,
    withholder,
)
from tests.support.fake_peer import serve_replication_methods
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.commands.watch import watch
from xnode.config import Settings
from xnode.core import misbehavior
from xnode.core.withholding import check_commitment
from xnode.devtools.byzantine import peer
from xnode.devtools.postgres import free_port

GROUP = bytes(range(16))


@pytest.fixture(autouse=True)
def _process_logging_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """watch() configures structlog for its process, caching loggers on first use; here
    it runs inside the test process, whose later tests capture those loggers' events."""
    monkeypatch.setattr("xnode.commands.watch.configure_logging", lambda *_: None)


async def test_one_round_reports_the_doctored_chain_payload_and_the_node_down(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    addresses = {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys}
    chain_env.register(node_spec, addresses)
    settings = node_settings(database, node_spec, **chain_env.settings())
    node = await start_node(**{**settings, "listen_address": addresses[100]})
    async with NodeClient(node.address) as client:
        (indexed,) = await publish(client, 100, [commit_envelope(GROUP)])
    doctored = envelopes_pb2.OriginatorEnvelope.FromString(
        resigned(indexed, node_spec.keys[200], b"doctored")
    )

    async def query(request: bytes, context: Any) -> bytes:
        return api.QueryEnvelopesResponse(envelopes=[indexed, doctored]).SerializeToString()

    handler = grpc.unary_unary_rpc_method_handler(
        query, request_deserializer=bytes, response_serializer=bytes
    )
    fake = await serve_replication_methods({"QueryEnvelopes": handler}, addresses[200])
    try:
        watchdog = Settings(
            **{
                **chain_env.settings(),
                "metrics_address": "",
                "watchdog_timeout_seconds": 5,
                "watchdog_slow_seconds": 2,
            }
        )
        await watch(watchdog, once=True)
    finally:
        await fake.stop(None)
    async with NodeClient(node.address) as client:
        reports = await taken(client)
    assert sorted(reports) == [
        (misbehavior.FAILED_REQUEST, 300),
        (misbehavior.BLOCKCHAIN_INCONSISTENCY, 200),
    ]


def _watchdog(nodes_file: Path, **extra: Any) -> Settings:
    return Settings(
        nodes_file=str(nodes_file),
        metrics_address="",
        watchdog_timeout_seconds=5,
        watchdog_slow_seconds=2,
        **extra,
    )


async def test_as_a_client_it_submits_the_withholding_a_nodes_holdings_prove(
    start_node: Any, database: str, tmp_path: Path
) -> None:
    async with beside_withholder(start_node, database, tmp_path, peer.withholding) as (
        node,
        log,
        spec,
    ):
        await watch(_watchdog(spec.nodes_file), once=True)
        hosted = await _reports(node.address)
    submitted: Reports = [r for r in hosted if not extension(r[2]).submitted_by_node]
    proves_withholding(submitted, log, spec)


async def test_as_a_node_a_lasting_non_answer_is_an_accusation_and_as_a_client_nothing(
    database: str, tmp_path: Path
) -> None:
    async with withholder(tmp_path, streamed_then_withheld(accounts=False)) as (spec, _, _):
        await watch(_watchdog(spec.nodes_file), once=True)  # as a client: no accusation
        as_node = {
            "watchdog_as_node": True,
            "database_dsn": database,
            "signer_key": spec.keys[100].hex(),
            "withholding_patience_seconds": 0.0,
        }
        await watch(_watchdog(spec.nodes_file, **as_node), once=True)
    conn = await asyncpg.connect(database)
    try:
        rows = await conn.fetch("SELECT type, misbehaving_node_id, report FROM misbehavior_reports")
    finally:
        await conn.close()
    assert [(r["type"], r["misbehaving_node_id"]) for r in rows] == [
        (misbehavior.WITHHOLDING_ACCUSATION, 500)
    ]
    accusation = extension(bytes(rows[0]["report"])).withholding_accusation
    opened = check_commitment(accusation.commitment, 500, {spec.keys[500].public_key})
    assert opened.sequence_id == peer.WITHHELD
    assert accusation.answer.startswith("UNAVAILABLE")
