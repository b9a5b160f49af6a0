"""Read-only node tokens (XIP-49 3.4): the subject is the key's address; peers accept them only
when they choose to, and only with a signature that recovers to that address."""

from __future__ import annotations

import base64
import json

import grpc
import pytest

from xnode.api.errors import STATUS_OF
from xnode.core.crypto import SigningKey, address_of
from xnode.core.errors import Reason
from xnode.core.node_tokens import (
    AuthError,
    TokenProvider,
    issue_token,
    read_only_subject,
    verify_token,
)
from xnode.core.registry import NodeEntry, Registry

NOW = 1_800_000_000
NODE = SigningKey.generate()
REGISTRY = Registry([NodeEntry(100, NODE.public_key, "http://a")])
READER = SigningKey.generate()


def _claims(token: str) -> dict[str, object]:
    segment = token.split(".")[1]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(segment + "==="))
    return decoded


def test_a_read_only_token_names_the_address_of_its_key() -> None:
    token = TokenProvider(READER, None, lambda: NOW).token_for(100)
    assert _claims(token)["sub"] == "0x" + address_of(READER.public_key).hex()
    identity = verify_token(token, REGISTRY, 100, NOW, read_only=True)
    assert identity.read_only and identity.node_id is None
    assert identity.address == address_of(READER.public_key)
    assert identity.expires_at == NOW + 3600


def test_read_only_tokens_are_refused_unless_the_node_accepts_them() -> None:
    token = issue_token(READER, None, 100, NOW)
    with pytest.raises(AuthError, match="read-only node tokens are not accepted"):
        verify_token(token, REGISTRY, 100, NOW)


def test_a_read_only_token_must_be_signed_by_the_key_it_names() -> None:
    # Signed by READER, claiming the registered node's address: refused.
    forged = issue_token(READER, None, 100, NOW)
    header, _, signature = forged.split(".")
    body = _claims(forged) | {"sub": read_only_subject(NODE.public_key)}
    encoded = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    with pytest.raises(AuthError, match="does not recover to its subject"):
        verify_token(f"{header}.{encoded}.{signature}", REGISTRY, 100, NOW, read_only=True)


@pytest.mark.parametrize(
    ("token", "now", "error"),
    [
        (issue_token(READER, None, 200, NOW), NOW, "audience is not this node"),
        (issue_token(READER, None, 100, NOW), NOW + 3601, "token expired"),
    ],
)
def test_read_only_tokens_get_the_same_audience_and_time_checks(
    token: str, now: int, error: str
) -> None:
    with pytest.raises(AuthError, match=error):
        verify_token(token, REGISTRY, 100, now, read_only=True)


def test_a_registered_node_s_token_is_unchanged_by_read_only_acceptance() -> None:
    identity = verify_token(issue_token(NODE, 100, 100, NOW), REGISTRY, 100, NOW, read_only=True)
    assert identity.node_id == 100 and not identity.read_only


def test_a_publish_to_a_read_only_node_is_a_failed_precondition() -> None:
    assert STATUS_OF[Reason.READ_ONLY] is grpc.StatusCode.FAILED_PRECONDITION
