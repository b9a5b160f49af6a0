"""What the official client (libxmtp 1.10.0) publishes passes the payload checks, and
tampered copies are refused naming the field (INVALID_ARGUMENT reasons).

The fixtures are client envelopes captured by tests/e2e/clients/test_capture_payloads.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import ValidPayerEnvelope, build_payer_envelope, validate_payer_envelope
from xnode.core.errors import Reason, Rejected
from xnode.core.key_packages import parse_key_package
from xnode.core.mls import ContentType, MlsError, parse_group_message
from xnode.core.topics import Topic

FIXTURES = Path(__file__).parents[2] / "fixtures" / "official_client"
PAYER = SigningKey.generate()
NODE = 100
# Inside the captured key packages' lifetimes (they were made at 1795462670).
NOW_S = 1_795_470_000
# What the captured ones may be refused for, all INVALID_ARGUMENT at the API.
INVALID = {Reason.INVALID_PAYLOAD, Reason.TOPIC_MISMATCH, Reason.MALFORMED}


def captured(kind: str) -> list[envelopes_pb2.ClientEnvelope]:
    lines = (FIXTURES / f"{kind}.hex").read_text().split()
    return [envelopes_pb2.ClientEnvelope.FromString(bytes.fromhex(line)) for line in lines]


def validate(client: envelopes_pb2.ClientEnvelope, now_s: int = NOW_S) -> ValidPayerEnvelope:
    return validate_payer_envelope(build_payer_envelope(client, PAYER, NODE), NODE, now_s)


def refused(client: envelopes_pb2.ClientEnvelope, now_s: int = NOW_S) -> Rejected:
    with pytest.raises(Rejected) as caught:
        validate(client, now_s)
    assert caught.value.reason in INVALID
    return caught.value


KINDS = ["group_message", "welcome_message", "upload_key_package", "identity_update"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_captured_payload_is_accepted(kind: str) -> None:
    for client in captured(kind):
        assert validate(client).payload == kind


def test_commits_and_application_messages_are_told_apart_by_their_framing() -> None:
    valid = [validate(c) for c in captured("group_message")]
    assert {v.framing.content_type for v in valid if v.framing} == {
        ContentType.COMMIT,
        ContentType.APPLICATION,
    }
    # The client's first commit of a group names no chain payload; later ones name one.
    assert any(v.is_commit and not v.depends_on.to_dict() for v in valid)
    assert any(v.is_commit and v.depends_on.to_dict() for v in valid)


def _with_data(client: envelopes_pb2.ClientEnvelope, data: bytes) -> envelopes_pb2.ClientEnvelope:
    copy = envelopes_pb2.ClientEnvelope()
    copy.CopyFrom(client)
    copy.group_message.v1.data = data
    return copy


def test_a_group_message_of_another_group_is_refused() -> None:
    client = captured("group_message")[0]
    other = envelopes_pb2.ClientEnvelope()
    other.CopyFrom(client)
    topic = Topic.parse(client.aad.target_topic)
    other.aad.target_topic = Topic(topic.kind, bytes(len(topic.identifier))).raw
    assert "is not the topic's group" in refused(other).detail
    data = bytearray(client.group_message.v1.data)
    data[5] ^= 0xFF  # a byte of the group id inside the framing
    assert "group_message.v1.data" in refused(_with_data(client, bytes(data))).detail


@pytest.mark.parametrize("data", [b"hi", b"\x00\x01\x00\x02", b"\x00\x01\x00\x03\x00"])
def test_garbage_group_messages_are_refused_naming_the_field(data: bytes) -> None:
    client = captured("group_message")[0]
    assert refused(_with_data(client, data)).detail.startswith("group_message.v1.data")
    assert refused(_with_data(client, b"")).detail == "group message has no v1 data"


def test_a_truncated_private_message_is_refused() -> None:
    data = captured("group_message")[0].group_message.v1.data
    with pytest.raises(MlsError, match="ciphertext"):
        parse_group_message(data[:-1])
    with pytest.raises(MlsError, match="after its end"):
        parse_group_message(data + b"\x00")


def _key_package(client: envelopes_pb2.ClientEnvelope) -> bytes:
    return client.upload_key_package.key_package.key_package_tls_serialized


def _with_key_package(
    client: envelopes_pb2.ClientEnvelope, data: bytes
) -> envelopes_pb2.ClientEnvelope:
    copy = envelopes_pb2.ClientEnvelope()
    copy.CopyFrom(client)
    copy.upload_key_package.key_package.key_package_tls_serialized = data
    return copy


def test_key_packages_are_tied_to_their_installation_key() -> None:
    for client in captured("upload_key_package"):
        package = parse_key_package(_key_package(client), NOW_S)
        assert package.signature_key == Topic.parse(client.aad.target_topic).identifier
        assert package.cipher_suite == 3  # what libxmtp 1.10.0 uses


def test_a_key_package_with_a_flipped_signature_byte_is_refused() -> None:
    client = captured("upload_key_package")[0]
    data = bytearray(_key_package(client))
    data[-1] ^= 0x01  # the KeyPackageTBS signature
    detail = refused(_with_key_package(client, bytes(data))).detail
    assert detail.endswith("signature: the signature does not verify")


def test_a_key_package_with_a_changed_leaf_is_refused() -> None:
    client = captured("upload_key_package")[0]
    data = bytearray(_key_package(client))
    data[10] ^= 0x01  # inside init_key: both signatures cover it
    assert "does not verify" in refused(_with_key_package(client, bytes(data))).detail


def test_a_key_package_on_another_installations_topic_is_refused() -> None:
    client, other = captured("upload_key_package")[:2]
    moved = _with_key_package(other, _key_package(client))
    assert "is not the topic's installation" in refused(moved).detail


def test_an_expired_or_future_key_package_is_refused() -> None:
    client = captured("upload_key_package")[0]
    package = parse_key_package(_key_package(client), NOW_S)
    assert "lifetime" in refused(client, package.not_after + 1).detail
    assert "lifetime" in refused(client, package.not_before - 2 * 3600).detail


@pytest.mark.parametrize(
    ("offset", "value", "field"),
    [(1, 0x02, "version"), (3, 0x05, "cipher_suite")],
)
def test_a_key_package_with_another_version_or_suite_is_refused(
    offset: int, value: int, field: str
) -> None:
    client = captured("upload_key_package")[0]
    data = bytearray(_key_package(client))
    data[offset] = value
    assert field in refused(_with_key_package(client, bytes(data))).detail


def test_a_welcome_for_another_installation_is_refused() -> None:
    client = captured("welcome_message")[0]
    other = envelopes_pb2.ClientEnvelope()
    other.CopyFrom(client)
    other.welcome_message.v1.installation_key = bytes(32)
    assert "installation_key" in refused(other).detail
