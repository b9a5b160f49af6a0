"""Leaf formats (xnode.core.leaves): format 2 commits to the expiry beside the content."""

from __future__ import annotations

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.leaves import (
    FORMAT_V1,
    envelope_leaf,
    leaf_matches,
    leaf_v2,
    provably_expired,
    signed_content,
)
from xnode.core.retention import NEVER
from xnode.core.verification import verify_envelope

KEY = SigningKey((21).to_bytes(32, "big"))
PAYER = SigningKey((22).to_bytes(32, "big"))


def signed(sequence_id: int, data: bytes = b"m") -> bytes:
    client = group_message_envelope(b"g" * 16, data)
    payer = validate_payer_envelope(build_payer_envelope(client, PAYER, 100), 100)
    return originate(payer, 100, sequence_id, 5_000_000_000 + sequence_id, KEY).raw


def test_format_2_commits_to_the_expiry_beside_the_content() -> None:
    raw = signed(1)
    content, expiry = signed_content(raw)
    assert expiry > 0
    opening = b"\x02" + expiry.to_bytes(8, "big") + keccak256(content)
    assert envelope_leaf(raw) == merkle.leaf_hash(opening) == leaf_v2(content, expiry)
    assert leaf_v2(content, expiry + 1) != leaf_v2(content, expiry)
    assert envelope_leaf(raw, FORMAT_V1) == merkle.leaf_hash(content)
    assert envelope_leaf(raw) != envelope_leaf(raw, FORMAT_V1)


def test_the_leaf_is_the_same_wherever_it_is_computed() -> None:
    raw = signed(2)
    originated = originate(
        validate_payer_envelope(
            build_payer_envelope(group_message_envelope(b"g" * 16, b"m"), PAYER, 100), 100
        ),
        100,
        2,
        5_000_000_002,
        KEY,
    )
    verified = verify_envelope(raw, {100: KEY.public_key}, 100)
    assert originated.leaf == envelope_leaf(raw)
    assert getattr(verified, "leaf", None) == envelope_leaf(raw)


def test_a_leaf_matches_its_envelope_in_either_format_and_nothing_else() -> None:
    raw, other = signed(3), signed(3, b"other")
    assert leaf_matches(envelope_leaf(raw), raw)
    assert leaf_matches(envelope_leaf(raw, FORMAT_V1), raw)
    assert not leaf_matches(envelope_leaf(other), raw)
    assert not leaf_matches(envelope_leaf(raw), b"\xff not an envelope")
    unsigned = envelopes_pb2.OriginatorEnvelope.FromString(raw).unsigned_originator_envelope
    assert unsigned[:1] != b"\x02"  # a format 1 preimage never looks like a format 2 one


def test_only_a_passed_committed_expiry_is_provable() -> None:
    assert provably_expired(100, 100)
    assert not provably_expired(101, 100)
    assert not provably_expired(NEVER, 10**12)
    assert not provably_expired(None, 10**12)  # format 1: no committed expiry
