"""Checks on envelopes received from peers, and the order rules of XIP-49 3.2.7."""

from __future__ import annotations

import time

import pytest

from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey, originator_digest
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.verification import (
    InvalidEnvelope,
    Position,
    RejectReason,
    order_problem,
    verify_batch,
    verify_envelope,
)
from xnode.core.wire import FrameError, field, originator_envelopes, repeated

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
PAYER = SigningKey.generate()
KEYS = {100: KEY.public_key}
GROUP = bytes(16)
NOW = time.time_ns()


def envelope(seq: int = 1, ns: int = NOW, key: SigningKey = KEY, target: int = 100) -> bytes:
    payer = build_payer_envelope(group_message_envelope(GROUP, b"hi %d" % seq), PAYER, target)
    valid = validate_payer_envelope(payer, target)
    return originate(valid, 100, seq, ns, key).raw


def resigned(unsigned: envelopes_pb2.UnsignedOriginatorEnvelope, key: SigningKey) -> bytes:
    body = unsigned.SerializeToString()
    return envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=body,
        originator_signature=signature_pb2.RecoverableEcdsaSignature(
            bytes=key.sign(originator_digest(body))
        ),
    ).SerializeToString()


def test_a_good_envelope_is_verified_with_its_columns() -> None:
    raw = envelope(seq=7)
    got = verify_envelope(raw, KEYS, 100)
    assert isinstance(got, IndexedEnvelope)
    assert (got.originator_node_id, got.sequence_id, got.originator_ns) == (100, 7, NOW)
    assert got.topic == b"\x00" + GROUP
    assert got.payer_address == PAYER.address
    assert got.raw == raw


def test_signed_by_another_key_is_rejected_and_blamed_on_whoever_served_it() -> None:
    got = verify_envelope(envelope(key=OTHER), KEYS, 100)
    assert isinstance(got, InvalidEnvelope)
    assert got.reason is RejectReason.BAD_ORIGINATOR_SIGNATURE
    assert "not by originator 100's registry key" in got.detail
    assert not got.signed_by_originator


def test_tampered_content_is_rejected() -> None:
    raw = envelope()
    outer = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        outer.unsigned_originator_envelope
    )
    unsigned.originator_sequence_id = 99
    outer.unsigned_originator_envelope = unsigned.SerializeToString()
    got = verify_envelope(outer.SerializeToString(), KEYS, 100)
    assert isinstance(got, InvalidEnvelope)
    assert got.reason is RejectReason.BAD_ORIGINATOR_SIGNATURE


def test_an_invalid_payload_signed_by_its_originator_is_blamed_on_the_originator() -> None:
    raw = envelope()
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelopes_pb2.OriginatorEnvelope.FromString(raw).unsigned_originator_envelope
    )
    payer = envelopes_pb2.PayerEnvelope.FromString(unsigned.payer_envelope_bytes)
    payer.payer_signature.bytes = b"\x01" * 64 + b"\x05"  # no such recovery id
    unsigned.payer_envelope_bytes = payer.SerializeToString()
    got = verify_envelope(resigned(unsigned, KEY), KEYS, 100)
    assert isinstance(got, InvalidEnvelope)
    assert got.reason is RejectReason.INVALID_PAYLOAD
    assert got.signed_by_originator
    assert "payer signature" in got.detail


def test_a_payload_targeting_another_originator_is_invalid() -> None:
    raw = envelope(target=200)  # originated by 100 although the payer chose 200
    got = verify_envelope(raw, KEYS, 100)
    assert isinstance(got, InvalidEnvelope)
    assert got.reason is RejectReason.INVALID_PAYLOAD


@pytest.mark.parametrize(
    ("raw", "keys", "expected", "reason"),
    [
        (b"\xff\xff", KEYS, 100, RejectReason.MALFORMED),
        (envelope(), {}, 100, RejectReason.UNKNOWN_ORIGINATOR),
        (envelope(), KEYS, 200, RejectReason.UNEXPECTED_ORIGINATOR),
    ],
    ids=["malformed", "unknown originator", "not what was asked for"],
)
def test_other_rejections(raw: bytes, keys: dict[int, bytes], expected: int, reason: str) -> None:
    got = verify_envelope(raw, keys, expected)
    assert isinstance(got, InvalidEnvelope)
    assert got.reason == reason


def test_batches_keep_their_order() -> None:
    raws = [envelope(seq=s) for s in (1, 2, 3)]
    got = verify_batch([raws[0], b"junk", *raws[1:]], KEYS, 100)
    assert [type(v).__name__ for v in got] == [
        "IndexedEnvelope",
        "InvalidEnvelope",
        "IndexedEnvelope",
        "IndexedEnvelope",
    ]


def verified(seq: int, ns: int = NOW) -> IndexedEnvelope:
    return IndexedEnvelope(100, seq, ns, b"\x00" + GROUP, 0, b"", b"")


PREVIOUS = Position(5, NOW, b"prev")


@pytest.mark.parametrize(
    ("previous", "env", "direct", "problem"),
    [
        (PREVIOUS, verified(6, NOW + 1), True, None),
        (PREVIOUS, verified(6, NOW), True, None),  # equal timestamps are allowed
        (PREVIOUS, verified(8, NOW + 1), True, "sequence id 8 follows 5"),
        (PREVIOUS, verified(8, NOW + 1), False, None),  # a relay's gap proves nothing
        (PREVIOUS, verified(6, NOW - 1), True, "timestamped before sequence id 5"),
        (PREVIOUS, verified(6, NOW - 1), False, "timestamped before sequence id 5"),
        (PREVIOUS, verified(6, NOW + 301 * 10**9), True, "in the future"),
        (PREVIOUS, verified(4, NOW - 5), True, None),  # below the newest: a duplicate check
        (None, verified(1), True, None),
        (None, verified(3), True, "the first sequence id is 3, not 1"),
        (None, verified(3, NOW - 200 * 86400 * 10**9), True, None),  # older ones expired
    ],
)
def test_order_rules(
    previous: Position | None, env: IndexedEnvelope, direct: bool, problem: str | None
) -> None:
    got = order_problem(previous, env, NOW, check_sequence=direct)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got


@pytest.mark.parametrize(
    ("previous", "env", "committed", "problem"),
    [
        (PREVIOUS, verified(8, NOW + 1), 7, None),  # 6 and 7 were checkpointed: expired
        (PREVIOUS, verified(8, NOW + 1), 6, "sequence id 8 follows 5"),  # 7 never committed
        (None, verified(501, NOW), 500, None),  # a log pruned below its checkpoint
        (None, verified(502, NOW), 500, "the first sequence id is 502, not 1"),
        (PREVIOUS, verified(6, NOW - 1), 100, "timestamped before"),  # still a fault
    ],
)
def test_watermarks_excuse_gaps_the_originator_committed_to(
    previous: Position | None, env: IndexedEnvelope, committed: int, problem: str | None
) -> None:
    got = order_problem(previous, env, NOW, check_sequence=True, committed=committed)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got


def test_frames_yield_the_envelope_bytes_untouched() -> None:
    raws = [envelope(seq=s) for s in (1, 2)]
    frame = field(1, repeated(1, raws))
    assert originator_envelopes(frame) == raws
    assert originator_envelopes(field(1, b"")) == []  # keepalive
    with pytest.raises(FrameError):
        originator_envelopes(frame[:-3])


def test_a_flipped_recovery_id_is_refused_naming_the_key_it_recovers_to() -> None:
    """(r, s) still verifies against the originator's key with the other v, but clients
    recover: the bytes served must recover to the registry key, so v is checked too."""
    raw = envelope(seq=3)
    outer = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    sig = outer.originator_signature.bytes
    outer.originator_signature.bytes = sig[:64] + bytes([sig[64] ^ 1])
    got = verify_envelope(outer.SerializeToString(), KEYS, 100)
    assert isinstance(got, InvalidEnvelope)
    assert got.reason is RejectReason.BAD_ORIGINATOR_SIGNATURE
    assert got.detail.startswith("sequence id 3: signed by 0x")
    assert "not by originator 100's registry key" in got.detail
    assert not got.signed_by_originator
