"""The client's checks of XIP-49 3.3.4: each broken rule raises its own exception."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import replace

import pytest

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core.client_checks import (
    MAX_CLOCK_SKEW_NS,
    AadMismatch,
    BadOriginatorSignature,
    CheckedEnvelope,
    MalformedEnvelope,
    OriginatorOrder,
    OutOfOrder,
    PayerEnvelopeMismatch,
    TimestampSkew,
    UnauthenticatedData,
    UnknownOriginator,
    check_published,
    check_received,
    check_timestamp,
)
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.topics import Topic, TopicKind

NODE = 100
NODE_KEY = SigningKey.generate()
PAYER = SigningKey.generate()
GROUP = bytes(range(16))
TOPIC = Topic(TopicKind.GROUP_MESSAGES, GROUP).raw
KEYS = {NODE: NODE_KEY.public_key}


def payer_envelope(
    data: bytes = b"hi", depends_on: Cursor | None = None
) -> envelopes_pb2.PayerEnvelope:
    client = group_message_envelope(GROUP, data, depends_on)
    client.aad.target_originator = NODE
    return build_payer_envelope(client, PAYER, NODE)


def originated(
    sequence_id: int = 1,
    payer: envelopes_pb2.PayerEnvelope | None = None,
    ns: int | None = None,
    key: SigningKey = NODE_KEY,
) -> bytes:
    valid = validate_payer_envelope(payer or payer_envelope(), NODE)
    return originate(valid, NODE, sequence_id, ns or time.time_ns(), key).raw


def test_a_genuine_envelope_passes_with_its_fields() -> None:
    env = check_received(originated(7, payer_envelope(depends_on=Cursor({200: 3}))), KEYS, [TOPIC])
    assert (env.originator_node_id, env.sequence_id, env.topic) == (NODE, 7, TOPIC)
    assert env.depends_on == Cursor({200: 3}) and not env.is_commit


def test_bytes_that_do_not_decode_are_malformed() -> None:
    with pytest.raises(MalformedEnvelope):
        check_received(b"\xff\xff\xff", KEYS)


def test_an_originator_outside_the_registry_is_unknown() -> None:
    with pytest.raises(UnknownOriginator, match="not in the registry"):
        check_received(originated(), {200: NODE_KEY.public_key})


def test_a_signature_by_another_key_is_refused() -> None:
    with pytest.raises(BadOriginatorSignature, match="registry key"):
        check_received(originated(key=SigningKey.generate()), KEYS)


def test_a_tampered_payload_no_longer_matches_the_originator_signature() -> None:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(originated())
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    unsigned.originator_ns += 1
    envelope.unsigned_originator_envelope = unsigned.SerializeToString()
    with pytest.raises(BadOriginatorSignature):
        check_received(envelope.SerializeToString(), KEYS)


def test_a_payload_of_another_topic_than_asked_is_refused() -> None:
    with pytest.raises(AadMismatch, match="not asked for"):
        check_received(originated(), KEYS, [Topic(TopicKind.GROUP_MESSAGES, bytes(16)).raw])


def test_aad_naming_another_originator_is_refused() -> None:
    client = group_message_envelope(GROUP, b"x")
    client.aad.target_originator = 200
    payer = build_payer_envelope(client, PAYER, 200)
    # The originator signs it anyway (a misbehaving node): the client still refuses it.
    valid = validate_payer_envelope(payer, 200)
    raw = originate(valid, NODE, 1, time.time_ns(), NODE_KEY).raw
    with pytest.raises(AadMismatch, match="targets originator 200, not 100"):
        check_received(raw, KEYS)


def test_a_client_envelope_the_payer_did_not_sign_is_unauthenticated() -> None:
    raw = originated()
    check_received(raw, KEYS, payers=[PAYER.address])
    with pytest.raises(UnauthenticatedData, match="not by a payer this client trusts"):
        check_received(raw, KEYS, payers=[SigningKey.generate().address])
    payer = payer_envelope()
    payer.ClearField("payer_signature")
    valid = validate_payer_envelope(payer_envelope(), NODE)
    unsigned = dataclasses.replace(valid, raw=payer.SerializeToString())
    with pytest.raises(UnauthenticatedData, match="no payer signature"):
        check_received(originate(unsigned, NODE, 1, time.time_ns(), NODE_KEY).raw, KEYS)


def test_a_publish_answer_must_carry_the_payer_envelope_sent() -> None:
    sent = payer_envelope(b"mine")
    env = check_received(originated(payer=sent), KEYS)
    check_published(sent, env, NODE, time.time_ns())
    with pytest.raises(PayerEnvelopeMismatch):
        check_published(payer_envelope(b"not mine"), env, NODE, time.time_ns())
    with pytest.raises(AadMismatch, match="published to 200"):
        check_published(sent, env, 200, time.time_ns())
    # A commit comes back as the chain's payload (originator 0), indexed by the target.
    check_published(sent, replace(env, originator_node_id=0), NODE, time.time_ns())


def test_timestamps_more_than_30_minutes_off() -> None:
    now = time.time_ns()
    old = check_received(originated(ns=now - MAX_CLOCK_SKEW_NS - 10**9), KEYS)
    check_timestamp(old, now, published=False)  # old is fine for what was stored long ago
    with pytest.raises(TimestampSkew):
        check_timestamp(old, now, published=True)  # but not for what was just published
    future = check_received(originated(ns=now + MAX_CLOCK_SKEW_NS + 10**9), KEYS)
    with pytest.raises(TimestampSkew):
        check_timestamp(future, now, published=False)


def envelope(origin: int, seq: int, ns: int = 0) -> CheckedEnvelope:
    return CheckedEnvelope(origin, seq, ns or seq, TOPIC, Cursor(), False, b"")


def test_sequence_ids_rise_strictly_per_originator_from_the_start_cursor() -> None:
    order = OriginatorOrder(Cursor({100: 5}))
    with pytest.raises(OutOfOrder, match="duplicate"):
        order.accept(envelope(100, 5))
    order.accept(envelope(100, 9))
    order.accept(envelope(200, 1))
    with pytest.raises(OutOfOrder):
        order.accept(envelope(100, 8))
    with pytest.raises(OutOfOrder, match="timestamped before"):
        order.accept(envelope(100, 10, ns=1))
    assert order.cursor == Cursor({100: 9, 200: 1})
