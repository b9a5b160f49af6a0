"""The verifier (xnode.core.evidence) against generated adversaries.

Liars: from everything an honest node 100 signed (its log: one envelope per sequence id,
timestamps that only grow, valid payloads, honest dependencies, its checkpoint and its honest
account of its holdings) plus envelopes anyone else signs in its name, a liar assembles
reports of every proven kind: any subset, repeated, in any order, under any misbehaving node.
None proves anything. Guilty: a node that forks a sequence id or signs timestamps that go
back is proven, whatever honest envelopes pad the report."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.withholding_log import CommittedLog, leaving_out
from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey, originator_digest
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import DUPLICATE_SEQUENCE_ID, OUT_OF_ORDER, SAFETY_TYPES
from xnode.core.withholding import withholding_report

HONEST, LIAR = 100, 200
KEY, LIAR_KEY, PAYER = (SigningKey(bytes([n]) * 32) for n in (31, 32, 33))
KEYS = {HONEST: (KEY.public_key,), LIAR: (LIAR_KEY.public_key,)}
T_NS = 1_800_000_000 * 10**9
SIGNED: dict[tuple[int, int, bytes, bytes, int], bytes] = {}


def signed(seq: int, ns: int, text: bytes, key: SigningKey = KEY, depends: int = 0) -> bytes:
    """An envelope of originator 100 (cached: signing is the slow part)."""
    cache = (seq, ns, text, key.secret, depends)
    if cache not in SIGNED:
        client = group_message_envelope(
            bytes(16), text, Cursor({HONEST: depends} if depends else {})
        )
        payer = build_payer_envelope(client, PAYER, HONEST)
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
            originator_node_id=HONEST,
            originator_sequence_id=seq,
            originator_ns=ns,
            payer_envelope_bytes=payer.SerializeToString(),
        ).SerializeToString()
        SIGNED[cache] = envelopes_pb2.OriginatorEnvelope(
            unsigned_originator_envelope=unsigned,
            originator_signature=signature_pb2.RecoverableEcdsaSignature(
                bytes=key.sign(originator_digest(unsigned))
            ),
        ).SerializeToString()
    return SIGNED[cache]


HONEST_LOG = [signed(s, T_NS + s * 1000, b"m%d" % s, depends=s - 1) for s in range(1, 9)]
# What others sign in node 100's name: the liar's own key, an edit of an honest envelope.
IN_ITS_NAME = [
    signed(3, T_NS + 3000, b"other 3", key=LIAR_KEY),
    signed(4, T_NS, b"earlier 4", key=LIAR_KEY),
    signed(5, T_NS + 5000, b"ahead", key=LIAR_KEY, depends=9),
]


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(sorted(SAFETY_TYPES)),
    picked=st.lists(st.sampled_from(HONEST_LOG + IN_ITS_NAME), min_size=1, max_size=6),
    accused=st.sampled_from([HONEST, LIAR, 300]),
)
def test_no_report_built_from_an_honest_log_proves_anything(
    kind: int, picked: list[bytes], accused: int
) -> None:
    report = misbehavior.safety_report(kind, accused, picked, T_NS)
    assert why_unproven(report, KEYS) is not None


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=8),
    data=st.data(),
)
def test_no_withholding_report_from_an_honest_account_proves_anything(
    size: int, data: st.DataObject
) -> None:
    """The honest account, signed at any time at or after the checkpoint, of any sequence id
    it covers, opened or not, against any node."""
    log = CommittedLog(KEY, HONEST, size, T_NS)
    s = data.draw(st.integers(1, size))
    at = T_NS + data.draw(st.integers(0, 400 * 86_400)) * 10**9
    commitment = log.commitment(s, opened=data.draw(st.booleans()))
    accused = data.draw(st.sampled_from([HONEST, LIAR]))
    report = withholding_report(accused, commitment, log.holdings(at_ns=at), T_NS)
    assert why_unproven(report, KEYS) is not None


@settings(max_examples=100, deadline=None)
@given(
    fork_at=st.integers(1, 8),
    padding=st.lists(st.sampled_from(HONEST_LOG), max_size=4),
    data=st.data(),
)
def test_a_fork_or_timestamps_that_go_back_are_always_proven(
    fork_at: int, padding: list[bytes], data: st.DataObject
) -> None:
    """Node 100 signs a second envelope at one sequence id (DUPLICATE_SEQUENCE_ID), or stamps
    a later sequence id before an earlier one (OUT_OF_ORDER): whatever honest envelopes the
    reporter adds and in whatever order, the report proves it."""
    other = signed(fork_at, T_NS + fork_at * 1000, b"forked")
    fork = [HONEST_LOG[fork_at - 1], other, *padding]
    back = [signed(fork_at + 1, T_NS, b"stamped back"), HONEST_LOG[fork_at - 1], *padding]
    for kind, envelopes in ((DUPLICATE_SEQUENCE_ID, fork), (OUT_OF_ORDER, back)):
        shuffled = data.draw(st.permutations(envelopes))
        report = misbehavior.safety_report(kind, HONEST, shuffled, T_NS)
        assert why_unproven(report, KEYS) is None, kind


@settings(max_examples=60, deadline=None)
@given(size=st.integers(min_value=2, max_value=8), data=st.data())
def test_an_account_that_leaves_out_a_committed_id_is_always_proven(
    size: int, data: st.DataObject
) -> None:
    log = CommittedLog(KEY, HONEST, size, T_NS)
    s = data.draw(st.integers(1, size))
    lie = log.holdings(leaving_out(log, s))
    report = withholding_report(HONEST, log.commitment(s), lie, T_NS)
    assert why_unproven(report, KEYS) is None
