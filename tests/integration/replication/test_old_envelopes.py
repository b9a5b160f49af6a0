"""A node catching up months later judges key packages at their envelopes' own time: the
official client's key packages live ~90 days and are kept up to 6 months, so envelopes 120
and 200 days old are stored without a report, and `xnode audit` of the catching-up node says
clean; one whose key package had already expired when its originator signed it is refused
and reported with proof."""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from tests.conftest import Network
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import key_package_envelope
from xnode.commands.audit import AuditOptions, audit_node
from xnode.config import Settings
from xnode.core import misbehavior
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.withholding import extended
from xnode.store.identity import claim_database
from xnode.store.sequencer import Sequencer

DAY_S = 86_400
LIFETIME_S = 90 * DAY_S
PAYER = SigningKey.generate()


def key_package(seed: int, made_s: int, retention_days: int) -> Any:
    """A payer envelope for node 100 carrying a key package made at `made_s`, as the
    originator accepted it then."""
    client = key_package_envelope(bytes([seed]) * 32, made_s, LIFETIME_S)
    payer = build_payer_envelope(client, PAYER, 100, retention_days)
    return validate_payer_envelope(payer, 100, made_s)


async def originate_back_then(dsn: str, key: SigningKey, batches: list[tuple[Any, int]]) -> None:
    """Node 100's own sequencer, on its own database, signing each payload at its time: the
    log a node that has run for months holds."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        await claim_database(pool, 100, key.public_key)
        sequencer = Sequencer(pool, 100, key, "months-ago")
        await sequencer.prime()
        for payload, at_s in batches:
            await sequencer.append([payload], at_s * NS_PER_SECOND)
    finally:
        await pool.close()


async def stored_and_reports(dsn: str) -> tuple[list[int], list[mb.UnsignedMisbehaviorReport]]:
    conn = await asyncpg.connect(dsn)
    try:
        seqs = await conn.fetch(
            "SELECT originator_sequence_id FROM originator_envelopes"
            " WHERE originator_node_id = 100 ORDER BY 1"
        )
        reports = await conn.fetch("SELECT report FROM misbehavior_reports")
    finally:
        await conn.close()
    unsigned = [
        mb.UnsignedMisbehaviorReport.FromString(
            mb.MisbehaviorReport.FromString(bytes(r[0])).unsigned_misbehavior_report
        )
        for r in reports
    ]
    return [r[0] for r in seqs], [u for u in unsigned if u.misbehaving_node_id == 100]


async def test_a_catch_up_months_later_keeps_honest_key_packages_and_audits_clean(
    start_node: Any, network: Network
) -> None:
    now = int(time.time())
    then_200, then_120 = now - 200 * DAY_S, now - 120 * DAY_S
    await originate_back_then(
        network.dsns[100],
        network.spec.keys[100],
        [
            (key_package(1, then_200 - 60, 365), then_200),  # kept a year by its payer
            (key_package(2, then_120 - 60, 0), then_120),  # the default 6 months
        ],
    )
    await start_node(**network.settings(100))
    await start_node(**network.settings(200))

    async def caught_up() -> bool:
        return (await stored_and_reports(network.dsns[200]))[0] == [1, 2]

    await eventually(caught_up)
    _, reports = await stored_and_reports(network.dsns[200])
    assert reports == [], [misbehavior.type_name(int(r.type)) for r in reports]
    verdict = await audit_node(Settings(**network.settings(200)), AuditOptions(show_progress=False))
    assert verdict.clean, verdict.describe()
    assert verdict.envelopes >= 2


async def test_a_key_package_expired_when_signed_is_refused_and_judged(
    start_node: Any, network: Network
) -> None:
    then = int(time.time()) - 120 * DAY_S
    expired_then = key_package(3, then - LIFETIME_S - DAY_S, 0)
    await originate_back_then(network.dsns[100], network.spec.keys[100], [(expired_then, then)])
    await start_node(**network.settings(100))
    await start_node(**network.settings(200))

    async def reported() -> bool:
        return any(
            r.type == misbehavior.INVALID_PAYLOAD
            for r in (await stored_and_reports(network.dsns[200]))[1]
        )

    await eventually(reported)
    stored, reports = await stored_and_reports(network.dsns[200])
    assert stored == []
    keys = {n: [k.public_key] for n, k in network.spec.keys.items()}
    # Refused and reported, naming the rule epoch it was judged by; a key package's
    # lifetime is MLS, xnode's reading: judged, not proven (docs/evidence.md).
    for r in reports:
        assert "judged, not proven" in (why_unproven(r, keys) or "")
        assert extended(r).rule_epoch == 1
