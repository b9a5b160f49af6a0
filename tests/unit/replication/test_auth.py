"""Node tokens (XIP-49 3.2.5, docs/protocol.md): format, signature scheme and every refusal."""

from __future__ import annotations

import base64
import json
import re

import jwt
import pytest

from xnode.core.crypto import SigningKey, jwt_digest, recover_public_key
from xnode.core.node_tokens import (
    AuthError,
    TokenProvider,
    issue_token,
    token_from_metadata,
    verify_token,
)
from xnode.core.registry import NodeEntry, Registry

NOW = 1_800_000_000
KEYS = {n: SigningKey.generate() for n in (100, 200, 300)}
REGISTRY = Registry(
    [
        NodeEntry(100, KEYS[100].public_key, "http://a"),
        NodeEntry(200, KEYS[200].public_key, "http://b"),
        NodeEntry(300, KEYS[300].public_key, "http://c", enabled=False),
    ]
)


def b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def test_token_has_the_wire_format_and_a_keccak_domain_separated_signature() -> None:
    token = issue_token(KEYS[100], 100, 200, NOW)
    header, claims, signature = token.split(".")
    assert json.loads(b64(header)) == {"alg": "ES256K", "typ": "JWT"}
    assert json.loads(b64(claims)) == {"sub": "100", "aud": ["200"], "iat": NOW, "exp": NOW + 3600}
    sig = b64(signature)
    assert len(sig) == 65
    signing_input = f"{header}.{claims}".encode()
    assert recover_public_key(sig, jwt_digest(signing_input)) == KEYS[100].public_key


def test_valid_token_names_its_sender() -> None:
    identity = verify_token(issue_token(KEYS[100], 100, 200, NOW), REGISTRY, 200, NOW + 10)
    assert (identity.node_id, identity.expires_at) == (100, NOW + 3600)


@pytest.mark.parametrize(
    ("token", "now", "reason"),
    [
        (issue_token(KEYS[100], 100, 300, NOW), NOW, "audience is not this node (200)"),
        (issue_token(KEYS[100], 100, 200, NOW), NOW + 3601, "token expired 1 s ago"),
        (issue_token(KEYS[100], 100, 200, NOW + 61), NOW, "61 s in the future"),
        (issue_token(KEYS[100], 400, 200, NOW), NOW, "node 400 is not registered"),
        (issue_token(KEYS[300], 300, 200, NOW), NOW, "node 300 is disabled"),
        (issue_token(KEYS[100], 200, 200, NOW), NOW, "does not recover to node 200's registry"),
        ("not.a.token", NOW, "does not decode"),
    ],
    ids=["wrong audience", "expired", "future", "unregistered", "disabled", "wrong key", "junk"],
)
def test_refusals_say_why(token: str, now: int, reason: str) -> None:
    with pytest.raises(AuthError, match=re.escape(reason)):
        verify_token(token, REGISTRY, 200, now)


def test_a_minute_of_clock_skew_is_accepted() -> None:
    verify_token(issue_token(KEYS[100], 100, 200, NOW + 60), REGISTRY, 200, NOW)


def test_tampered_claims_are_refused() -> None:
    header, _, signature = issue_token(KEYS[100], 100, 200, NOW).split(".")
    forged = base64.urlsafe_b64encode(
        json.dumps({"sub": "100", "aud": ["200"], "iat": NOW, "exp": NOW + 86400}).encode()
    )
    with pytest.raises(AuthError, match="does not recover"):
        verify_token(f"{header}.{forged.decode().rstrip('=')}.{signature}", REGISTRY, 200, NOW)


def test_stock_sha256_es256k_and_other_algorithms_are_refused() -> None:
    hs = jwt.encode({"sub": "100", "aud": ["200"], "iat": NOW, "exp": NOW + 60}, "k" * 32)
    with pytest.raises(AuthError, match="algorithm must be ES256K"):
        verify_token(hs, REGISTRY, 200, NOW)


def signed_token(claims: dict[str, object], key: SigningKey = KEYS[100]) -> str:
    """A token with any claims, signed as the network signs (what anyone can make)."""
    header = base64.urlsafe_b64encode(b'{"alg":"ES256K","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    signing_input = header + b"." + body
    sig = base64.urlsafe_b64encode(key.sign(jwt_digest(signing_input))).rstrip(b"=")
    return (signing_input + b"." + sig).decode()


def test_a_long_lived_token_is_trusted_for_an_hour_after_its_iat() -> None:
    token = signed_token({"sub": "100", "aud": ["200"], "iat": NOW, "exp": NOW + 86400})
    assert verify_token(token, REGISTRY, 200, NOW + 3599).expires_at == NOW + 3600
    with pytest.raises(AuthError, match="issued 3600 s ago"):
        verify_token(token, REGISTRY, 200, NOW + 3600)


def test_missing_expiry_is_refused() -> None:
    token = signed_token({"sub": "100", "aud": ["200"], "iat": NOW})
    with pytest.raises(AuthError, match="exp"):
        verify_token(token, REGISTRY, 200, NOW)


@pytest.mark.parametrize(
    "metadata",
    [
        [("node-authorization", "TOKEN")],
        [("authorization", "Bearer TOKEN")],
        [("authorization", "TOKEN")],
        [("authorization", "other"), ("node-authorization", "TOKEN")],
    ],
)
def test_token_is_read_from_either_metadata_key(metadata: list[tuple[str, str]]) -> None:
    assert token_from_metadata(metadata) == "TOKEN"


def test_no_token_in_metadata() -> None:
    with pytest.raises(AuthError, match="no node token"):
        token_from_metadata([("user-agent", "x")])


def test_provider_reuses_a_token_then_renews_it_before_expiry() -> None:
    now = [float(NOW)]
    provider = TokenProvider(KEYS[100], 100, lambda: now[0])
    first = provider.token_for(200)
    assert provider.token_for(200) == first
    assert provider.token_for(300) != first  # one per peer: the audience differs
    now[0] += 3600 - 301
    assert provider.token_for(200) == first
    now[0] += 2
    renewed = provider.token_for(200)
    assert renewed != first
    verify_token(renewed, REGISTRY, 200, int(now[0]))
