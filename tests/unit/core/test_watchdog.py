"""What the watchdog concludes from probes and served envelopes (XIP-49 3.2.7): slow-but-live
and the watchdog's own isolation convict nobody; forks and self-dependencies are filed once."""

from __future__ import annotations

from tests.unit.core.test_evidence import KEYS, NOW, STRANGER, signed
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import misbehavior
from xnode.core.watchdog import EnvelopeWitness, Probe, liveness_kind, liveness_reports, skipped
from xnode.core.withholding import MAX_HOLDINGS_SPAN

SLOW_S = 5.0
REQUESTS = {n: api.QueryEnvelopesRequest(limit=n) for n in (100, 200, 300)}


def test_probe_outcomes_and_their_liveness_failures() -> None:
    assert (
        liveness_kind(Probe(100, "DEADLINE_EXCEEDED", 10.0), SLOW_S)
        == misbehavior.UNRESPONSIVE_NODE
    )
    assert liveness_kind(Probe(100, "UNAVAILABLE", 0.01), SLOW_S) == misbehavior.FAILED_REQUEST
    assert liveness_kind(Probe(100, "OK", 5.5), SLOW_S) == misbehavior.SLOW_NODE
    # Slow but live within t, or the watchdog's own request refused: no misbehavior.
    for status, seconds in [("OK", 4.9), ("RESOURCE_EXHAUSTED", 0.01), ("CANCELLED", 0.1)]:
        assert liveness_kind(Probe(100, status, seconds), SLOW_S) is None


def test_a_report_carries_the_query_made_and_the_time_waited() -> None:
    probes = [Probe(100, "OK", 0.01), Probe(200, "DEADLINE_EXCEEDED", 10.0), Probe(300, "OK", 1)]
    (report,) = liveness_reports(probes, REQUESTS, SLOW_S, 7)
    assert (report.type, report.misbehaving_node_id) == (misbehavior.UNRESPONSIVE_NODE, 200)
    assert report.liveness.query == REQUESTS[200]
    assert report.liveness.response_time_ns == misbehavior.MAX_RESPONSE_TIME_NS  # 10 s > uint32
    assert not report.submitted_by_node and report.reporter_time_ns == 7


def test_a_watchdog_cut_off_from_every_node_reports_none() -> None:
    probes = [Probe(n, "DEADLINE_EXCEEDED", 10.0) for n in (100, 200, 300)]
    assert liveness_reports(probes, REQUESTS, SLOW_S, 7) == []
    assert liveness_reports([Probe(100, "OK", 0.1)], REQUESTS, SLOW_S, 7) == []


def test_forks_across_nodes_are_filed_once_and_honest_copies_never() -> None:
    witness = EnvelopeWitness(KEYS)
    honest = signed(5, text=b"a")
    assert witness.offer(honest, 1) == []
    assert witness.offer(honest, 2) == []  # the same envelope from another node
    (fork,) = witness.offer(signed(5, text=b"b"), 3)
    assert (fork.type, fork.misbehaving_node_id) == (misbehavior.DUPLICATE_SEQUENCE_ID, 100)
    assert witness.offer(signed(5, text=b"b"), 4) == []
    assert witness.offer(signed(6, text=b"c", key=STRANGER), 5) == []  # proves nothing


def test_an_envelope_depending_on_its_originators_future_is_filed() -> None:
    witness = EnvelopeWitness(KEYS)
    (causal,) = witness.offer(signed(3, depends_on={100: 3}), 1)
    assert causal.type == misbehavior.CAUSAL_ORDERING
    assert witness.offer(signed(4, depends_on={100: 3, 200: 50}), 2) == []


def test_an_honest_originator_with_a_clock_minutes_off_is_filed_for_nothing() -> None:
    witness = EnvelopeWitness(KEYS)
    skew = 7 * 60 * 10**9
    for seq, ns in [(1, NOW + skew), (2, NOW + skew + 1), (3, NOW - skew)]:
        # the third goes back in time: replication's OUT_OF_ORDER check, not the watchdog's
        assert witness.offer(signed(seq, ns=ns, depends_on={100: seq - 1}), NOW) == []


def test_the_ids_a_node_skipped_of_its_own_log() -> None:
    assert skipped(2, [3, 4, 6, 9]) == [5, 7, 8]
    assert skipped(4, [8]) == [5, 6, 7]  # past what was read before
    assert skipped(9, []) == []
    # Nothing read of it yet: its oldest ids may have expired, so only gaps between.
    assert skipped(0, [40, 42]) == [41]
    assert len(skipped(1, [10**6])) == MAX_HOLDINGS_SPAN
