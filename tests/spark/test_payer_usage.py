"""spark_jobs.payer_usage: totals equal the signed fees of the envelopes, each counted once,
whichever nodes exported it. The expected sums are computed here from the signed bytes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs import gen_data
from xnode.core.constants import NS_PER_SECOND, SECONDS_PER_DAY
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import parse_originator_envelope, validate_payer_envelope
from xnode.core.fees import Fees

DAY0 = 1_760_000_000 * NS_PER_SECOND
PAYERS = [SigningKey(keccak256(b"usage-payer", bytes([i]))) for i in range(3)]


def _signed(originator: int, count: int) -> list[bytes]:
    key = gen_data.node_key(originator)
    return [
        gen_data.signed_envelope(
            originator,
            key,
            seq,
            DAY0 + (seq % 3) * SECONDS_PER_DAY * NS_PER_SECOND + seq,  # three UTC days
            b"message %d" % seq,
            PAYERS[seq % len(PAYERS)],
            Fees(1000 * seq + 7, (seq % 4) * 50),
        )
        for seq in range(1, count + 1)
    ]


def _table(originator: int, raws: list[bytes]) -> pa.Table:
    """Export rows as `xnode export --with-payloads` writes them, fees from the signed bytes."""
    parsed = [parse_originator_envelope(r) for r in raws]
    payers = [validate_payer_envelope(p.payer_envelope, originator).payer_address for p in parsed]
    return pa.table(
        {
            "originator_sequence_id": pa.array([p.sequence_id for p in parsed], pa.int64()),
            "originator_ns": pa.array([p.originator_ns for p in parsed], pa.int64()),
            "topic": pa.array([p.topic() for p in parsed], pa.binary()),
            "topic_kind": pa.array([0] * len(parsed), pa.int8()),
            "expiry_unixtime": pa.array([p.expiry for p in parsed], pa.int64()),
            "payer_address": pa.array(payers, pa.binary()),
            "size_bytes": pa.array([len(r) for r in raws], pa.int32()),
            "base_fee_picodollars": pa.array([p.fees.base for p in parsed], pa.int64()),
            "congestion_fee_picodollars": pa.array([p.fees.congestion for p in parsed], pa.int64()),
            "originator_envelope": pa.array(raws, pa.binary()),
            "originator_node_id": pa.array([originator] * len(raws), pa.int32()),
        }
    )


def _expected(raws: list[bytes]) -> dict[bytes, list[int]]:
    """payer -> [envelopes, base, congestion], from the signed UnsignedOriginatorEnvelopes."""
    from xmtp.xmtpv4.envelopes import envelopes_pb2

    totals: dict[bytes, list[int]] = defaultdict(lambda: [0, 0, 0])
    for raw in raws:
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelopes_pb2.OriginatorEnvelope.FromString(raw).unsigned_originator_envelope
        )
        payer = envelopes_pb2.PayerEnvelope.FromString(unsigned.payer_envelope_bytes)
        address = validate_payer_envelope(payer, unsigned.originator_node_id).payer_address
        totals[address][0] += 1
        totals[address][1] += unsigned.base_fee_picodollars
        totals[address][2] += unsigned.congestion_fee_picodollars
    return dict(totals)


def test_totals_equal_the_signed_fees_each_envelope_once(
    spark: Any, payer_usage: ModuleType, tmp_path: Path
) -> None:
    own_100, own_200 = _signed(100, 30), _signed(200, 12)
    exports = tmp_path / "exports"
    # node 100 exports its own and a replica of 200's; node 200 its own and part of 100's
    gen_data.write_envelopes(exports / "node-100", _table(100, own_100))
    gen_data.write_envelopes(exports / "node-100", _table(200, own_200))
    gen_data.write_envelopes(exports / "node-200", _table(200, own_200))
    gen_data.write_envelopes(exports / "node-200", _table(100, own_100[:20]))
    out = tmp_path / "usage"

    data = payer_usage.run(spark, [exports], out)

    expected = _expected(own_100 + own_200)
    payers = pq.read_table(out / "payers.parquet").to_pylist()
    got = {
        bytes(r["payer_address"]): [
            r["envelopes"],
            int(r["base_fee_picodollars"]),
            int(r["congestion_fee_picodollars"]),
        ]
        for r in payers
    }
    assert got == expected
    assert data.envelopes == 42
    assert data.rows_read == 30 + 12 + 12 + 20
    per_day = pq.read_table(out / "usage.parquet").to_pylist()
    assert {r["day"] for r in per_day} == {"2025-10-09", "2025-10-10", "2025-10-11"}
    assert sum(int(r["base_fee_picodollars"]) for r in per_day) == sum(
        v[1] for v in expected.values()
    )
    html = (out / "report.html").read_text()
    assert html.count("<svg") == len(PAYERS)  # a chart per payer
    for payer in PAYERS:
        assert "0x" + payer.address.hex() in (out / "report.md").read_text()


def test_envelopes_exported_again_after_a_loss_are_counted_once(
    spark: Any, payer_usage: ModuleType, tmp_path: Path
) -> None:
    """Node 100 lost sequence ids 10..20, fetched them back from a peer and exported them
    again (an export of the restored node, beside its first one); node 200 exported them
    too."""
    own = _signed(100, 30)
    first, again = tmp_path / "exports", tmp_path / "after-the-loss"
    gen_data.write_envelopes(first / "node-100", _table(100, own))
    gen_data.write_envelopes(again / "node-100", _table(100, own[9:20]))
    gen_data.write_envelopes(first / "node-200", _table(100, own[9:20]))

    data = payer_usage.run(spark, [first, again], tmp_path / "usage")

    assert data.rows_read == 30 + 11 + 11
    assert data.envelopes == 30
    payers = pq.read_table(tmp_path / "usage" / "payers.parquet").to_pylist()
    got = {bytes(r["payer_address"]): int(r["base_fee_picodollars"]) for r in payers}
    assert got == {payer: totals[1] for payer, totals in _expected(own).items()}
