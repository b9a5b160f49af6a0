"""Sizes and budgets (core.sizes): nothing the caps admit is too large to send once signed,
and answers stop at their byte budget."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core.errors import Reason, Rejected
from xnode.core.sizes import (
    ENVELOPE_FRAMING_OVERHEAD,
    MAX_LIVENESS_REPORT_BYTES,
    Sizes,
    repeated_topic,
    within_budget,
)

WIDEST = 2**64 - 1
SIGNATURE = signature_pb2.RecoverableEcdsaSignature(bytes=b"\x01" * 65)


def _unsigned(payer: bytes) -> bytes:
    return envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=2**32 - 1,
        originator_sequence_id=WIDEST,
        originator_ns=-1,  # a negative int64 takes the widest varint
        payer_envelope_bytes=payer,
        base_fee_picodollars=WIDEST,
        congestion_fee_picodollars=WIDEST,
        expiry_unixtime=WIDEST,
    ).SerializeToString()


def _widest_envelopes(payer: bytes) -> list[envelopes_pb2.OriginatorEnvelope]:
    unsigned = _unsigned(payer)
    proof = envelopes_pb2.BlockchainProof(transaction_hash=b"\x02" * 32, node_signature=SIGNATURE)
    return [
        envelopes_pb2.OriginatorEnvelope(
            unsigned_originator_envelope=unsigned, originator_signature=SIGNATURE
        ),
        envelopes_pb2.OriginatorEnvelope(
            unsigned_originator_envelope=unsigned, blockchain_proof=proof
        ),
    ]


def _framed_in_every_answer(envelope: envelopes_pb2.OriginatorEnvelope) -> list[int]:
    """The envelope's size alone in each answer that carries envelopes."""
    newest = api.GetNewestEnvelopeResponse.Response(originator_envelope=envelope)
    return [
        api.SubscribeOriginatorsResponse(
            envelopes=api.SubscribeOriginatorsResponse.Envelopes(envelopes=[envelope])
        ).ByteSize(),
        api.GetNewestEnvelopeResponse(results=[newest]).ByteSize(),
        api.QueryEnvelopesResponse(envelopes=[envelope]).ByteSize(),
        api.PublishPayerEnvelopesResponse(originator_envelopes=[envelope]).ByteSize(),
        api.SubscribeEnvelopesResponse(envelopes=[envelope]).ByteSize(),
    ]


@pytest.mark.parametrize("payer_size", [0, 1, 127, 128, 16_383, 2**21, 4 * 1024 * 1024])
def test_the_framing_overhead_bounds_every_answer_of_one_envelope(payer_size: int) -> None:
    payer = b"\x00" * payer_size
    for envelope in _widest_envelopes(payer):
        for framed in _framed_in_every_answer(envelope):
            assert framed - payer_size <= ENVELOPE_FRAMING_OVERHEAD


SMALL = Sizes(
    message_bytes=4096, payer_envelope_bytes=1024, answer_budget_bytes=2048, report_bytes=1024
)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 2 * SMALL.payer_envelope_bytes), retention=st.integers(0, 2**32 - 1))
def test_nothing_admitted_is_unsendable(size: int, retention: int) -> None:
    """Sizes around the caps: a payer envelope is refused, or its signed envelope fits one
    message in every answer."""
    try:
        SMALL.check_payer_envelope(size, retention)
    except Rejected as refused:
        assert refused.reason is Reason.MALFORMED
        assert size > SMALL.payer_envelope_bytes or retention > SMALL.retention_days
        return
    for envelope in _widest_envelopes(b"\x00" * size):
        assert all(SMALL.fits_message(framed) for framed in _framed_in_every_answer(envelope))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, SMALL.payer_envelope_bytes), min_size=1, max_size=12))
def test_a_publish_whose_answer_would_not_fit_is_refused(sizes: list[int]) -> None:
    answer = api.PublishPayerEnvelopesResponse(
        originator_envelopes=[_widest_envelopes(b"\x00" * size)[0] for size in sizes]
    ).ByteSize()
    try:
        SMALL.check_publish_answer(sizes)
    except Rejected as refused:
        assert refused.reason is Reason.LIMIT_EXCEEDED
        assert "several requests" in str(refused)
        return
    assert SMALL.fits_message(answer)


def test_the_caps_name_what_does_not_hold_together() -> None:
    assert Sizes().problem() is None
    too_big = Sizes(payer_envelope_bytes=16 * 1024 * 1024)
    assert "answer_budget_bytes" in (too_big.problem() or "")
    over = Sizes(message_bytes=8 * 1024 * 1024)
    assert "message limit" in (over.problem() or "")


def test_the_refusals_say_what_the_limit_is() -> None:
    with pytest.raises(Rejected, match="payer envelope is 1025 bytes, the limit is 1024"):
        SMALL.check_payer_envelope(1025, 1)
    with pytest.raises(Rejected, match="message_retention_days is 4294967295, the limit is 3650"):
        SMALL.check_payer_envelope(10, 2**32 - 1)
    SMALL.check_payer_envelope(1024, 3650)


def test_liveness_reports_are_capped_below_other_reports() -> None:
    sizes = Sizes()
    sizes.check_report(MAX_LIVENESS_REPORT_BYTES, liveness=True)
    with pytest.raises(Rejected, match="liveness report"):
        sizes.check_report(MAX_LIVENESS_REPORT_BYTES + 1, liveness=True)
    sizes.check_report(sizes.report_bytes, liveness=False)
    with pytest.raises(Rejected) as refused:
        sizes.check_report(sizes.report_bytes + 1, liveness=False)
    assert refused.value.reason is Reason.MALFORMED


@given(sizes=st.lists(st.integers(0, 100), max_size=20), budget=st.integers(0, 500))
def test_an_answer_holds_a_prefix_within_its_budget_and_always_the_first(
    sizes: list[int], budget: int
) -> None:
    held = within_budget(sizes, budget)
    if sizes:
        assert held >= 1
    assert held == len(sizes) or sum(sizes[: held + 1]) > budget
    assert held <= 1 or sum(sizes[:held]) <= budget


def test_a_repeated_topic_is_named_by_both_positions() -> None:
    assert repeated_topic([b"a", b"b", b"c"]) is None
    assert repeated_topic([b"a", b"b", b"a", b"b"]) == (2, 0)
