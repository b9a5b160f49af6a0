"""Gateway clients identified by JWTs an application's backend signs (ES256, EdDSA, RS256)."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from xnode.gateway.clients import ClientAuth, JwtPolicy, Unauthenticated, load_jwt_keys

PEER = "10.0.0.1"


def pem_of(*private: Any) -> bytes:
    return b"".join(
        k.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        for k in private
    )


def token(key: Any, algorithm: str, **claims: Any) -> str:
    body = {"sub": "alice", "exp": int(time.time()) + 60, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=algorithm)


def bearer(value: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {value}")]


P256 = ec.generate_private_key(ec.SECP256R1())
ED = ed25519.Ed25519PrivateKey.generate()
RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_each_key_in_the_file_verifies_tokens_with_its_own_algorithm() -> None:
    keys = load_jwt_keys(pem_of(P256, ED, RSA))
    assert [a for a, _ in keys] == ["ES256", "EdDSA", "RS256"]
    auth = ClientAuth({}, JwtPolicy(keys))
    assert auth.required
    for key, algorithm in ((P256, "ES256"), (ED, "EdDSA"), (RSA, "RS256")):
        assert auth.client_of(bearer(token(key, algorithm)), PEER) == "jwt:alice"
    with_issuer = token(ED, "EdDSA", iss="app.example")
    assert auth.client_of(bearer(with_issuer), PEER) == "jwt:app.example/alice"


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: token(ec.generate_private_key(ec.SECP256R1()), "ES256"), "signature"),
        (lambda: token(P256, "ES256", exp=int(time.time()) - 3600), "expired"),
        (lambda: token(P256, "ES256", exp=None), "exp"),
        (lambda: token(P256, "ES256", sub=None), "sub"),
        (lambda: token(P256, "ES256", aud="someone-else"), "audience"),
        (lambda: jwt.encode({"sub": "a", "exp": 2**40}, "s" * 32, algorithm="HS256"), "signature"),
        (lambda: token(P256, "ES256")[:-4] + "AAAA", "signature"),
    ],
    ids=["other key", "expired", "no exp", "no sub", "wrong aud", "HS256 forged", "tampered"],
)
def test_tokens_that_do_not_verify_are_refused_with_the_reason(make: Any, why: str) -> None:
    auth = ClientAuth({}, JwtPolicy(load_jwt_keys(pem_of(P256)), audience="xmtp-gateway"))
    with pytest.raises(Unauthenticated) as refused:
        auth.client_of(bearer(make()), PEER)
    assert why in str(refused.value).lower(), refused.value


def test_audience_and_issuer_are_checked_when_configured() -> None:
    policy = JwtPolicy(load_jwt_keys(pem_of(ED)), audience="xmtp-gateway", issuer="app")
    auth = ClientAuth({}, policy)
    good = token(ED, "EdDSA", aud="xmtp-gateway", iss="app")
    assert auth.client_of(bearer(good), PEER) == "jwt:app/alice"
    with pytest.raises(Unauthenticated, match="iss"):
        auth.client_of(bearer(token(ED, "EdDSA", aud="xmtp-gateway", iss="other")), PEER)


def test_api_keys_and_tokens_work_side_by_side() -> None:
    auth = ClientAuth({"k1": "backend"}, JwtPolicy(load_jwt_keys(pem_of(ED))))
    assert auth.client_of(bearer("k1"), PEER) == "backend"
    assert auth.client_of(bearer(token(ED, "EdDSA")), PEER) == "jwt:alice"
    with pytest.raises(Unauthenticated, match="an API key or a JWT"):
        auth.client_of([], PEER)
    with pytest.raises(Unauthenticated, match="unknown API key"):
        auth.client_of(bearer("k2"), PEER)


def test_a_keys_file_without_public_keys_is_refused() -> None:
    with pytest.raises(ValueError, match="no PEM public key"):
        load_jwt_keys(b"hello")
    bad = b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    with pytest.raises(ValueError, match="block 1 is not a public key"):
        load_jwt_keys(bad)
    secp256k1 = ec.generate_private_key(ec.SECP256K1())
    with pytest.raises(ValueError, match="not a P-256, Ed25519 or RSA"):
        load_jwt_keys(pem_of(secp256k1))
