"""spark_jobs.misbehavior_aggregation on a hand-computed fixture (see FIXTURE below)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs import gen_data as g
from tests.conftest import ChainEnv
from tests.integration.chain.helpers import add_message_call, message_payload, send_raw_event
from tests.support.withholding_log import CommittedLog, leaving_out
from xmtp.identity.associations.signature_pb2 import RecoverableEcdsaSignature
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import key_package_envelope
from xnode.core.chain_payloads import ChainEvent, build_chain_payload
from xnode.core.crypto import SigningKey, blockchain_proof_digest
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.withholding import accusation_report, split_view_report, withholding_report

T0 = 1_800_000_000 * 10**9  # on an hour boundary
MIN = 60 * 10**9
T0_S = T0 // 10**9
KEYS = {n: g.node_key(n, seed=1) for n in (100, 200, 300, 400, 500, 600, 700)}
IMPOSTOR = SigningKey(b"\x07" * 32)
UNRESPONSIVE, SLOW, OUT_OF_ORDER, DUPLICATE = 1, 2, 4, 5

# FIXTURE. Hosts 100-400 and 900 (not in any registry) export; 500, 600, 700 misbehave.
#  host 100: #1 UNRESPONSIVE 500 @T0+10m; #2 = #1 exported again (exact duplicate);
#            #3 SLOW 700 @T0+5m; #4 DUPLICATE 600: two different envelopes 600:7  -> proof
#            #5 DUPLICATE 500 (client): two honest envelopes 500:1, 500:2          -> unverified
#            #6 UNRESPONSIVE 700 @T0+7m, client-submitted                 -> client_liveness
#  host 200: #1 UNRESPONSIVE 500 @T0+20m, client-submitted; #2 UNRESPONSIVE 500 @T0+70m;
#            #3 SLOW 700 @T0+6m signed by an impostor                              -> forged
#            #4 DUPLICATE 600 but one envelope signed by 400                       -> unverified
#            #5 UNRESPONSIVE 700 @T0+8m, the same client                  -> client_liveness
#  host 300: #1 UNRESPONSIVE 500 @T0+30m; #2 UNRESPONSIVE about itself @T0;
#            #3 DUPLICATE 600 with the same envelope twice                         -> unverified
#            #4 OUT_OF_ORDER 600, envelopes 600:8 then 600:10 (a gap, honest)      -> unverified
#            #5 OUT_OF_ORDER 600, 600:11 timestamped after 600:12                  -> proof
#  host 400: #1 bytes that do not decode                                           -> malformed
#  host 900: #1 UNRESPONSIVE 500; node 900 is not in the NodeRegistry     -> export refused
# The registry (registry.json, the contract's history): 100-700 added before T0, 700 disabled
# an hour before T0. So 500's window T0 has 5 other enabled nodes: more than a third is 2.
# 500/UNRESPONSIVE, window T0: reporting nodes {100, 300} (200's is a client's) -> flagged at
# the default share (1/3: 2 needed), not at 1/2 (3 needed). 700/UNRESPONSIVE: only a
# client's, through two hosts -> never flagged.


def envelope(originator: int, signer: int, seq: int, data: bytes, ns: int = T0) -> bytes:
    return g.signed_envelope(originator, KEYS[signer], seq, ns, data)


def old_key_package(originator: int, seq: int) -> bytes:
    """A key package the originator accepted and signed 200 days ago, valid then for 90 days:
    long expired today, honest on any day."""
    then = int(time.time()) - 200 * 86_400
    client = key_package_envelope(bytes([seq]) * 32, then - 60)
    payer = build_payer_envelope(client, SigningKey(b"\x09" * 32), originator)
    valid = validate_payer_envelope(payer, originator, then)
    return originate(valid, originator, seq, then * 10**9, KEYS[originator]).raw


@dataclass
class Host:
    node_id: int
    key: SigningKey
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, unsigned: Any, forged_by: SigningKey | None = None) -> dict[str, Any]:
        t = unsigned.reporter_time_ns + 1
        row = g.report_row(len(self.rows) + 1, self.node_id, self.key, unsigned, t, forged_by)
        self.rows.append(row)
        return row

    def write(self, root: Path, registry: dict[int, SigningKey]) -> None:
        """The host's export, signed by it (manifest.json), with the registry snapshot it
        names (which the council no longer reads)."""
        directory = g.node_dir(root, self.node_id)
        g.write_reports(directory, g.report_table(self.rows))
        g.write_nodes(directory, registry)
        g.sign_export(directory, self.node_id, self.key)


def registry(root: Path, **changes: list[tuple[int, bool]]) -> Path:
    """The NodeRegistry's history beside the exports: nodes 100-700 added a day before T0;
    `changes`: n<id>=[(time s, enabled)]."""
    by_node = {int(name[1:]): c for name, c in changes.items()}
    return g.write_registry(
        root.parent / f"{root.name}-registry.json", KEYS, T0_S - 86_400, by_node
    )


def build_fixture(root: Path) -> Path:
    h100, h200, h300, h400 = (Host(n, KEYS[n]) for n in (100, 200, 300, 400))
    h900 = Host(900, g.node_key(900, seed=1))
    row = h100.add(g.liveness_report(500, UNRESPONSIVE, T0 + 10 * MIN))
    h100.rows.append(dict(row, report_id=2))
    h100.add(g.liveness_report(700, SLOW, T0 + 5 * MIN))
    pair = [envelope(600, 600, 7, b"one"), envelope(600, 600, 7, b"two")]
    h100.add(g.safety_report(600, DUPLICATE, pair, T0 + 40 * MIN))
    honest = [envelope(500, 500, 1, b"one"), envelope(500, 500, 2, b"two")]
    h100.add(g.safety_report(500, DUPLICATE, honest, T0 + 44 * MIN))
    h100.add(g.liveness_report(700, UNRESPONSIVE, T0 + 7 * MIN, submitted_by_node=False))

    h200.add(g.liveness_report(500, UNRESPONSIVE, T0 + 20 * MIN, submitted_by_node=False))
    h200.add(g.liveness_report(500, UNRESPONSIVE, T0 + 70 * MIN))
    h200.add(g.liveness_report(700, SLOW, T0 + 6 * MIN), forged_by=IMPOSTOR)
    framed = [envelope(600, 600, 7, b"one"), envelope(600, 400, 7, b"two")]
    h200.add(g.safety_report(600, DUPLICATE, framed, T0 + 41 * MIN))
    h200.add(g.liveness_report(700, UNRESPONSIVE, T0 + 8 * MIN, submitted_by_node=False))

    h300.add(g.liveness_report(500, UNRESPONSIVE, T0 + 30 * MIN))
    h300.add(g.liveness_report(300, UNRESPONSIVE, T0))
    same = envelope(600, 600, 7, b"one")
    h300.add(g.safety_report(600, DUPLICATE, [same, same], T0 + 42 * MIN))
    gap = [envelope(600, 600, 8, b"eight"), envelope(600, 600, 10, b"ten")]
    h300.add(g.safety_report(600, OUT_OF_ORDER, gap, T0 + 43 * MIN))
    back = [envelope(600, 600, 11, b"eleven", T0 + 5), envelope(600, 600, 12, b"twelve", T0)]
    h300.add(g.safety_report(600, OUT_OF_ORDER, back, T0 + 45 * MIN))

    row = g.report_row(1, 400, KEYS[400], g.liveness_report(500, SLOW, T0), T0)
    h400.rows.append(dict(row, report=b"\xff\xff"))
    h900.add(g.liveness_report(500, UNRESPONSIVE, T0 + 15 * MIN))
    for host in (h100, h200, h300, h400, h900):
        host.write(root, KEYS)
    registry(root, n700=[(T0_S - 3600, False)])
    return root


def registry_of(root: Path) -> Path:
    return root.parent / f"{root.name}-registry.json"


@pytest.fixture(scope="module")
def fixture_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture(tmp_path_factory.mktemp("reports"))


@pytest.fixture(scope="module")
def result(spark: Any, aggregation: ModuleType, fixture_root: Path, tmp_path_factory: Any) -> Any:
    out = tmp_path_factory.mktemp("out") / "council"
    data = aggregation.run(spark, [fixture_root], out, registry_of(fixture_root))
    tables = {
        n: pq.read_table(out / f"{n}.parquet").to_pylist()
        for n in ("liveness", "client_liveness", "safety", "flagged", "rejected")
    }
    return data, tables, out


def test_counts_match_the_hand_computed_fixture(result: Any) -> None:
    data, _, _ = result
    assert data.rows_read == 17  # 900's export is refused: not read
    assert data.duplicates_removed == 1
    assert data.accepted == 10
    assert data.outcomes == {
        "accepted": 10,
        "forged": 1,
        "unverified_proof": 4,
        "malformed": 1,
    }
    assert list(data.refused_exports) == [str(fixture_root_of(data) / "node-900")]
    assert (
        "not the export of a node in the NodeRegistry"
        in data.refused_exports[str(fixture_root_of(data) / "node-900")]
    )


def fixture_root_of(data: Any) -> Path:
    return Path(data.inputs[0])


def test_liveness_windows(result: Any) -> None:
    _, tables, _ = result
    rows = {
        (r["misbehaving_node_id"], r["type"], (r["window_start_ns"] - T0) // MIN): r
        for r in tables["liveness"]
    }
    assert set(rows) == {(500, 1, 0), (500, 1, 60), (700, 2, 0), (300, 1, 0)}
    first = rows[(500, 1, 0)]
    # The duplicate counted once; unknown host 900 not at all; 200's is a client's.
    assert first["report_count"] == 2
    assert first["reporters"] == [100, 300]
    assert (first["enabled_nodes"], first["needed"]) == (5, 2)  # 700 is disabled
    assert first["flagged"] is True
    assert rows[(500, 1, 60)]["distinct_reporters"] == 1 and not rows[(500, 1, 60)]["flagged"]
    # Without the forged report, 700 has a single reporter: not flagged.
    assert rows[(700, 2, 0)]["reporters"] == [100] and not rows[(700, 2, 0)]["flagged"]
    # A node reporting itself is no peer.
    assert rows[(300, 1, 0)]["report_count"] == 1 and rows[(300, 1, 0)]["distinct_reporters"] == 0


def test_client_liveness_reports_are_kept_apart_and_flag_nobody(result: Any) -> None:
    """One client writing to two hosts about node 700: listed per host, never counted."""
    _, tables, _ = result
    clients = {
        (r["misbehaving_node_id"], r["type"], r["host_node_id"]): r["report_count"]
        for r in tables["client_liveness"]
    }
    assert clients == {(500, 1, 200): 1, (700, 1, 100): 1, (700, 1, 200): 1}
    assert not [r for r in tables["liveness"] if (r["misbehaving_node_id"], r["type"]) == (700, 1)]
    assert 700 not in {r["misbehaving_node_id"] for r in tables["flagged"]}


def test_forged_and_unverifiable_reports_are_rejected_with_reasons(result: Any) -> None:
    _, tables, _ = result
    rejected = {(r["host_node_id"], r["report_id"]): r for r in tables["rejected"]}
    assert {k: r["reason_code"] for k, r in rejected.items()} == {
        (100, 5): "unverified_proof",
        (200, 3): "forged",
        (200, 4): "unverified_proof",
        (300, 3): "unverified_proof",
        (300, 4): "unverified_proof",
        (400, 1): "malformed",
    }
    assert "envelope 1: not signed by node 600's registry key" in rejected[(200, 4)]["reason"]
    assert "no two envelopes with one sequence id" in rejected[(300, 3)]["reason"]
    # Honest but misleading: two honest envelopes, a gap left by expiry or a relay.
    assert "no two envelopes with one sequence id" in rejected[(100, 5)]["reason"]
    assert "a sequence gap alone proves nothing" in rejected[(300, 4)]["reason"]
    assert 500 not in {r["misbehaving_node_id"] for r in tables["safety"]}


def test_a_single_verified_proof_flags_the_node(result: Any) -> None:
    _, tables, _ = result
    proofs = {(r["host_node_id"], r["type"]) for r in tables["safety"]}
    assert proofs == {(100, DUPLICATE), (300, OUT_OF_ORDER)}
    [back] = [r for r in tables["safety"] if r["type"] == OUT_OF_ORDER]
    assert back["report_id"] == 5
    dup = next(r for r in tables["safety"] if r["type"] == DUPLICATE)
    assert (dup["duplicate_originator"], dup["duplicate_sequence_id"]) == (600, 7)
    flagged = {
        (r["misbehaving_node_id"], r["type"], r["basis"], r["evidence_count"])
        for r in tables["flagged"]
    }
    assert flagged == {
        (500, UNRESPONSIVE, "liveness_threshold", 1),
        (600, DUPLICATE, "safety_proof", 1),
        (600, OUT_OF_ORDER, "safety_proof", 1),
    }


def test_report_files_are_complete(result: Any) -> None:
    _, _, out = result
    assert sorted(p.name for p in out.iterdir()) == [
        "client_liveness.parquet",
        "flagged.parquet",
        "liveness.parquet",
        "rejected.parquet",
        "report.html",
        "report.md",
        "safety.parquet",
    ]
    html = (out / "report.html").read_text()
    assert html.count("<svg") == 4  # nodes 300, 500, 600, 700
    assert "Node 600" in html and "FLAGGED" in html
    md = (out / "report.md").read_text()
    assert "| Rejected | 6 |" in md and "## Node 500" in md
    assert "Refused exports (not read)" in md and "node-900" in md


def test_judged_share_is_respected(
    spark: Any, aggregation: ModuleType, fixture_root: Path, result: Any, tmp_path: Path
) -> None:
    at_third, _, _ = result  # the module's run, at the default share: 2 of 5 needed
    registry_file = registry_of(fixture_root)
    at_half = aggregation.run(
        spark, [fixture_root], tmp_path / "out", registry_file, Fraction(1, 2)
    )
    for data, flagged in ((at_third, True), (at_half, False)):
        liveness_flags = {
            r["misbehaving_node_id"] for r in data.flagged if r["basis"] == "liveness_threshold"
        }
        assert (500 in liveness_flags) is flagged, data.judged_share
        safety_flags = {
            r["misbehaving_node_id"] for r in data.flagged if r["basis"] == "safety_proof"
        }
        assert safety_flags == {600}, data.judged_share


def test_one_duplicate_sequence_report_alone_flags_the_node(
    spark: Any, aggregation: ModuleType, tmp_path: Path
) -> None:
    host = Host(100, KEYS[100])
    pair = [envelope(700, 700, 3, b"a"), envelope(700, 700, 3, b"b")]
    host.add(g.safety_report(700, DUPLICATE, pair, T0))
    host.write(tmp_path / "export", KEYS)

    data = aggregation.run(
        spark, [tmp_path / "export"], tmp_path / "out", registry(tmp_path / "export")
    )

    assert [(r["misbehaving_node_id"], r["basis"]) for r in data.flagged] == [(700, "safety_proof")]


def test_exports_without_a_report_flag_nobody(
    spark: Any, aggregation: ModuleType, tmp_path: Path
) -> None:
    """A quiet network files no report: the council's answer is that nobody is flagged."""
    for node_id in (100, 200):
        g.write_nodes(tmp_path / "export" / f"node-{node_id}", KEYS)
        g.sign_export(tmp_path / "export" / f"node-{node_id}", node_id, KEYS[node_id])

    data = aggregation.run(
        spark, [tmp_path / "export"], tmp_path / "out", registry(tmp_path / "export")
    )

    assert (data.rows_read, data.flagged, data.flagged_by_basis()) == (0, [], {})
    assert data.refused_exports == {}
    assert "Flagged nodes | none" in (tmp_path / "out" / "report.md").read_text()


def test_bad_input_writes_nothing(
    aggregation: ModuleType, inputs: ModuleType, tmp_path: Path, capsys: Any
) -> None:
    root = build_fixture(tmp_path / "export")
    out = tmp_path / "out"
    args = ["--input", str(root), "--out", str(out), "--registry"]

    assert aggregation.main([*args, str(tmp_path / "no-registry.json")]) == 2
    assert "cannot read the registry snapshot" in capsys.readouterr().err
    # Garbage the node itself signed: its export is read, and the job stops at the file.
    victim = next((root / "node-200" / "misbehavior_reports").rglob("*.parquet"))
    victim.write_bytes(b"garbage")
    g.sign_export(root / "node-200", 200, KEYS[200])
    assert aggregation.main([*args, str(registry_of(root))]) == 2
    err = capsys.readouterr().err
    assert str(victim) in err and "not a readable Parquet file" in err
    assert not out.exists()


def test_blockchain_proof_envelopes_are_checked_against_the_vouching_node(
    aggregation: ModuleType,
) -> None:
    """BLOCKCHAIN_INCONSISTENCY proofs carry chain payloads signed by the node that relayed them."""
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=0, originator_sequence_id=5, originator_ns=T0
    ).SerializeToString()
    tx = b"\x42" * 32
    proof = envelopes_pb2.BlockchainProof(
        transaction_hash=tx,
        node_signature=RecoverableEcdsaSignature(
            bytes=KEYS[600].sign(blockchain_proof_digest(unsigned, tx))
        ),
    )
    raw = envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned, blockchain_proof=proof
    ).SerializeToString()
    report = g.report_row(1, 100, KEYS[100], g.safety_report(600, 8, [raw], T0), T0)["report"]

    facts = aggregation.verify_report(report)

    assert facts["host_signer"] == KEYS[100].public_key
    assert facts["envelopes"] == [
        {"originator_node_id": 0, "sequence_id": 5, "signer": KEYS[600].public_key}
    ]


@pytest.mark.parametrize(
    "fields", [{"reporter_time_ns": 2**64 - 1}, {"misbehaving_node_id": 2**32 - 1}]
)
def test_out_of_range_fields_are_malformed_not_a_crash(
    aggregation: ModuleType, fields: dict[str, int]
) -> None:
    unsigned = g.liveness_report(500, UNRESPONSIVE, T0)
    for name, value in fields.items():
        setattr(unsigned, name, value)
    report = g.report_row(1, 100, KEYS[100], unsigned, T0)["report"]
    assert "out of range" in aggregation.verify_report(report)["error"]
    aggregation.verify_batch(pa.array([report]))  # converts to Arrow without overflow


def test_no_honest_node_is_flagged_by_forged_or_misleading_reports(
    spark: Any, aggregation: ModuleType, tmp_path: Path
) -> None:
    """Hosts 100-300 file everything one could build from node 700's honest envelopes, and
    one client complains about 700 through every host; only 600's real fork flags anyone."""
    INVALID_PAYLOAD, CAUSAL, CHAIN = 7, 6, 8
    early, late = envelope(700, 700, 4, b"four", T0), envelope(700, 700, 5, b"five", T0 + 9)
    resigned = envelope(700, 400, 4, b"other four")  # a "fork" the accused never signed
    misleading = [
        (DUPLICATE, [early, late]),
        (DUPLICATE, [early, resigned]),
        (OUT_OF_ORDER, [early, late]),
        (OUT_OF_ORDER, [late, early]),  # listed backwards: the signed order is still right
        (INVALID_PAYLOAD, [early]),
        (INVALID_PAYLOAD, [old_key_package(700, 6)]),  # judged at its time, not today
        (CAUSAL, [early, late]),
        (CHAIN, [early]),
    ]
    hosts = [Host(n, KEYS[n]) for n in (100, 200, 300)]
    for host in hosts:
        for kind, proof in misleading:
            host.add(g.safety_report(700, kind, proof, T0, submitted_by_node=True))
        host.add(g.liveness_report(700, UNRESPONSIVE, T0 + MIN, submitted_by_node=False))
    fork = [envelope(600, 600, 3, b"a"), envelope(600, 600, 3, b"b")]
    hosts[0].add(g.safety_report(600, DUPLICATE, fork, T0))
    for host in hosts:
        host.write(tmp_path / "export", KEYS)
    registry_file = registry(tmp_path / "export")

    data = aggregation.run(spark, [tmp_path / "export"], tmp_path / "out", registry_file)

    assert [(r["misbehaving_node_id"], r["type"]) for r in data.flagged] == [(600, DUPLICATE)]
    assert data.outcomes["unverified_proof"] == 3 * len(misleading)


def test_causal_and_chain_proofs_flag_only_the_guilty(
    spark: Any, aggregation: ModuleType, tmp_path: Path, chain_env: ChainEnv
) -> None:
    """Node 600 vouches for a chain payload its transaction did not carry; 700 signs a
    dependency on its own future. 500 vouches for the chain's own payload and signs an
    honest dependency: it is flagged by nothing, with or without the chain."""
    CAUSAL, CHAIN = 6, 8
    group = bytes(range(16))
    payload = message_payload(group, "on chain")
    call = add_message_call(group, payload)
    tx = send_raw_event(chain_env.url, chain_env.owner, chain_env.contracts.group_messages, call)
    event = ChainEvent(0, 1, group, payload, 0, bytes(32), tx, 0)
    doctored = dataclasses.replace(event, payload=message_payload(group, "doctored"))
    host = Host(100, KEYS[100])
    proofs = [
        (600, CHAIN, [build_chain_payload(doctored, 1, KEYS[600]).raw]),
        (500, CHAIN, [build_chain_payload(event, 1, KEYS[500]).raw]),
        (700, CAUSAL, [g.signed_envelope(700, KEYS[700], 4, T0, b"x", depends_on={700: 4})]),
        (500, CAUSAL, [g.signed_envelope(500, KEYS[500], 4, T0, b"y", depends_on={500: 3})]),
    ]
    for accused, kind, envelopes in proofs:
        host.add(g.safety_report(accused, kind, envelopes, T0, submitted_by_node=True))
    host.write(tmp_path / "export", KEYS)
    chain = aggregation.chain_lookup(chain_env.url, str(chain_env.contracts_file))
    registry_file = registry(tmp_path / "export")

    checked = aggregation.run(
        spark, [tmp_path / "export"], tmp_path / "out", registry_file, chain=chain
    )
    unchecked = aggregation.run(spark, [tmp_path / "export"], tmp_path / "out2", registry_file)

    def flags(data: Any) -> list[tuple[int, int]]:
        return sorted((r["misbehaving_node_id"], r["type"]) for r in data.flagged)

    assert flags(checked) == [(600, CHAIN), (700, CAUSAL)]
    assert checked.outcomes == {"accepted": 2, "unverified_proof": 2}
    assert flags(unchecked) == [(700, CAUSAL)]
    assert unchecked.outcomes == {"accepted": 1, "unverified_proof": 3}


def test_withholding_proofs_flag_the_withholder_and_accusations_need_a_threshold(
    spark: Any, aggregation: ModuleType, tmp_path: Path
) -> None:
    """600 signs holdings that leave out a sequence id its checkpoint covers: one report
    flags it. 500's honest holdings prove nothing. 700 is accused by two nodes with its own
    commitment (flagged: 2 of the 6 others needed at share 1/6); 400 by one with its
    commitment and two with an empty one or another node's checkpoint, which do not count."""
    withholder = CommittedLog(KEYS[600], 600, 5, T0)
    honest = CommittedLog(KEYS[500], 500, 5, T0)
    h100, h200, h300 = Host(100, KEYS[100]), Host(200, KEYS[200]), Host(300, KEYS[300])
    lie = withholder.holdings(leaving_out(withholder, 3))
    h100.add(withholding_report(600, withholder.commitment(3), lie, T0))
    h100.add(withholding_report(500, honest.commitment(3), honest.holdings(), T0))
    for host, accused in ((h100, 700), (h200, 700), (h100, 400)):
        accused_log = CommittedLog(KEYS[accused], accused, 3, T0)
        host.add(accusation_report(accused, accused_log.commitment(2), "UNAVAILABLE", T0, T0))
    empty = type(honest.commitment(2))()
    h200.add(accusation_report(400, empty, "UNAVAILABLE", T0, T0))
    # 300 signs two logs of one size that differ at every id: a split view, proven alone;
    # 500's one log twice proves nothing.
    shown = [CommittedLog(KEYS[300], 300, 5, t) for t in (T0, T0 + 1)]
    h200.add(split_view_report(300, shown[0].commitment(2), shown[1].commitment(2), T0))
    h200.add(split_view_report(500, honest.commitment(2), honest.commitment(2), T0))
    h300.add(accusation_report(400, honest.commitment(2), "UNAVAILABLE", T0, T0))
    for host in (h100, h200, h300):
        host.write(tmp_path / "export", KEYS)
    registry_file = registry(tmp_path / "export")

    data = aggregation.run(
        spark, [tmp_path / "export"], tmp_path / "out", registry_file, Fraction(1, 6)
    )

    flags = sorted((r["misbehaving_node_id"], r["type_name"], r["basis"]) for r in data.flagged)
    assert flags == [
        (300, "SPLIT_VIEW", "safety_proof"),
        (600, "WITHHOLDING", "safety_proof"),
        (700, "WITHHOLDING_ACCUSATION", "liveness_threshold"),
    ]
    assert data.outcomes == {"accepted": 5, "unverified_proof": 2, "unverified_commitment": 2}


def test_exports_are_read_only_as_their_node_signed_them(
    spark: Any, aggregation: ModuleType, tmp_path: Path
) -> None:
    """Node 100's operator adds a key for node 200 to its own registry snapshot and files a
    "fork" of 200 signed with it: the export is its own, but the fork does not verify against
    the contract's key. Invented hosts 1000-1300 report 200 unresponsive: refused, and they
    shrink nothing. Exports changed after signing, unsigned or signed by another node are
    refused by path; 200 is flagged by nothing."""
    root = tmp_path / "export"
    fake_200 = {**KEYS, 200: IMPOSTOR}
    h100 = Host(100, KEYS[100])
    fork = [g.signed_envelope(200, IMPOSTOR, 3, T0, data) for data in (b"a", b"b")]
    h100.add(g.safety_report(200, DUPLICATE, fork, T0, submitted_by_node=True))
    h100.write(root, fake_200)
    for invented in (1000, 1100, 1200, 1300):
        host = Host(invented, g.node_key(invented, seed=1))
        host.add(g.liveness_report(200, UNRESPONSIVE, T0 + MIN))
        host.write(root, {**KEYS, invented: host.key})
    tampered = {}
    for node_id in (300, 400, 500, 600):
        host = Host(node_id, KEYS[node_id])
        host.add(g.liveness_report(200, UNRESPONSIVE, T0 + MIN))
        host.write(root, KEYS)
        tampered[node_id] = g.node_dir(root, node_id)
    reports = tampered[300] / "misbehavior_reports"
    extra = Host(300, KEYS[300])
    extra.add(g.liveness_report(200, SLOW, T0 + 2 * MIN))
    g.write_reports(tmp_path / "extra", g.report_table(extra.rows))
    added = next((tmp_path / "extra" / "misbehavior_reports").rglob("*.parquet"))
    (reports / added.parent.name / "added.parquet").write_bytes(added.read_bytes())
    changed = next((tampered[400] / "misbehavior_reports").rglob("*.parquet"))
    changed.write_bytes(added.read_bytes())
    (tampered[500] / "manifest.json").unlink()
    g.sign_export(tampered[600], 600, KEYS[100])

    data = aggregation.run(spark, [root], tmp_path / "out", registry(root))

    assert data.flagged == []
    assert data.outcomes == {"unverified_proof": 1}
    why = {Path(path).name: reason for path, reason in data.refused_exports.items()}
    assert sorted(why) == [
        "node-1000", "node-1100", "node-1200", "node-1300", "node-300", "node-400", "node-500",
        "node-600",
    ]  # fmt: skip
    assert "added.parquet: not in the node's signed manifest (added)" in why["node-300"]
    assert f"{changed}: differs from the node's signed manifest" == why["node-400"]
    assert "no signed manifest" in why["node-500"]
    assert "not signed by the registry key of node 600" in why["node-600"]
    assert why["node-1000"] == "not the export of a node in the NodeRegistry"
