"""Captures what the official client (libxmtp 1.10.0) publishes, for the payload-check tests.

Runs scenarios.every_payload_kind, then reads every envelope node 100 holds and writes each
client envelope (the bytes the client signed for) to tests/fixtures/official_client/, one
hex line per payload. Run by hand when the library changes:
    XNODE_CAPTURE_PAYLOADS=1 pytest tests/e2e/clients/test_capture_payloads.py
Without the variable it checks that every captured payload was stored (nothing refused)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.e2e.clients.conftest import ClientNetwork
from tests.e2e.clients.test_python_bindings import run_scenario
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.envelopes import parse_originator_envelope

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parents[2] / "fixtures" / "official_client"


def test_the_official_clients_payloads_are_all_stored(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    run_scenario("every_payload_kind", client_network, tmp_path)
    nodes = client_network.nodes
    raw = asyncio.run(nodes.envelopes(100, [0, 1, *nodes.addresses]))
    by_kind: dict[str, list[str]] = {}
    for envelope in raw:
        client_bytes = parse_originator_envelope(envelope).payer_envelope.unsigned_client_envelope
        client = envelopes_pb2.ClientEnvelope.FromString(client_bytes)
        kind = client.WhichOneof("payload") or "none"
        by_kind.setdefault(kind, []).append(client_bytes.hex())
    assert {"group_message", "welcome_message", "upload_key_package", "identity_update"} <= set(
        by_kind
    ), sorted(by_kind)
    if os.environ.get("XNODE_CAPTURE_PAYLOADS"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for name, lines in by_kind.items():
            (FIXTURES / f"{name}.hex").write_text("\n".join(lines) + "\n")


def test_every_identity_update_of_the_clients_lifecycle_is_stored(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    """scenarios.identity_lifecycle: every kind of identity update (create, add installation,
    link a wallet, change recovery, revoke an installation, unlink a wallet) is accepted and
    on the chain. Captured, in chain order, to identity_lifecycle.hex."""
    run_scenario("identity_lifecycle", client_network, tmp_path)
    raw = asyncio.run(client_network.nodes.envelopes(100, [1]))
    captured = [parse_originator_envelope(e).payer_envelope.unsigned_client_envelope for e in raw]
    updates = [envelopes_pb2.ClientEnvelope.FromString(c) for c in captured]
    kinds = {a.WhichOneof("kind") for c in updates for a in c.identity_update.actions}
    assert kinds == {"create_inbox", "add", "revoke", "change_recovery_address"}, kinds
    if os.environ.get("XNODE_CAPTURE_PAYLOADS"):
        lines = [c.hex() for c in captured]
        (FIXTURES / "identity_lifecycle.hex").write_text("\n".join(lines) + "\n")
