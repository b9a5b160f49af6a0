from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xnode.core.crypto import (
    SECP256K1_ORDER,
    SignatureError,
    SigningKey,
    address_of,
    keccak256,
    originator_digest,
    payer_digest,
    recover_public_key,
)


def test_keccak256_is_keccak_not_sha3() -> None:
    # Ethereum's Keccak-256 of the empty string (SHA3-256 would be a7ffc6f8...).
    assert keccak256(b"").hex() == (
        "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
    )


def test_address_matches_known_ethereum_vector() -> None:
    # Private key 1 has the well-known address 0x7e5f...bdf.
    key = SigningKey((1).to_bytes(32, "big"))
    assert key.address.hex() == "7e5f4552091a69125d5dfcb7b8c2659029395bdf"
    assert address_of(key.public_key) == key.address


def test_domain_separation_changes_the_digest() -> None:
    body = b"same bytes"
    assert payer_digest(100, body) != payer_digest(200, body)
    assert payer_digest(100, body) != originator_digest(body)


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_sign_then_recover_round_trips_low_s(digest: bytes) -> None:
    key = SigningKey.generate()
    signature = key.sign(digest)
    assert len(signature) == 65 and signature[64] in (0, 1)
    assert int.from_bytes(signature[32:64], "big") <= SECP256K1_ORDER // 2
    assert recover_public_key(signature, digest) == key.public_key


def test_high_s_signature_is_rejected() -> None:
    key = SigningKey.generate()
    digest = keccak256(b"x")
    sig = key.sign(digest)
    s = int.from_bytes(sig[32:64], "big")
    flipped = sig[:32] + (SECP256K1_ORDER - s).to_bytes(32, "big") + bytes([sig[64] ^ 1])
    with pytest.raises(SignatureError, match="low-S"):
        recover_public_key(flipped, digest)


@pytest.mark.parametrize(
    ("signature", "message"),
    [(b"\x00" * 64, "65 bytes"), (b"\x01" * 64 + b"\x1b", "recovery id")],
)
def test_malformed_signatures_are_rejected(signature: bytes, message: str) -> None:
    with pytest.raises(SignatureError, match=message):
        recover_public_key(signature, keccak256(b"x"))


def test_signature_over_other_digest_recovers_another_key() -> None:
    key = SigningKey.generate()
    sig = key.sign(keccak256(b"a"))
    assert recover_public_key(sig, keccak256(b"b")) != key.public_key


def test_signature_with_r_not_below_the_order_is_rejected() -> None:
    too_big = (SECP256K1_ORDER + 1).to_bytes(32, "big") + (1).to_bytes(32, "big") + b"\x00"
    with pytest.raises(SignatureError, match="not below the curve order"):
        recover_public_key(too_big, keccak256(b"x"))


def test_signature_that_recovers_no_key_is_rejected() -> None:
    # r = 0 parses (it is below the order) but names no point: nothing recovers.
    no_point = bytes(32) + (1).to_bytes(32, "big") + b"\x00"
    with pytest.raises(SignatureError, match="does not recover"):
        recover_public_key(no_point, keccak256(b"x"))


def test_a_flipped_recovery_id_recovers_another_key() -> None:
    key = SigningKey.generate()
    digest = keccak256(b"x")
    sig = key.sign(digest)
    other = recover_public_key(sig[:64] + bytes([sig[64] ^ 1]), digest)
    assert other != key.public_key


def test_digest_must_be_32_bytes() -> None:
    sig = SigningKey.generate().sign(keccak256(b"x"))
    with pytest.raises(SignatureError, match="digest must be 32 bytes"):
        recover_public_key(sig, b"short")


def test_recovery_agrees_with_coincurve() -> None:
    from coincurve import PublicKey

    key = SigningKey.generate()
    digest = keccak256(b"y")
    sig = key.sign(digest)
    theirs = PublicKey.from_signature_and_message(sig, digest, hasher=None)
    assert recover_public_key(sig, digest) == theirs.format(compressed=False) == key.public_key
