"""The originator's validation rules (XIP-49 3.3.4) and envelope round trips; an
IndexedEnvelope crosses to and from the verifying processes pickled, every field kept."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xmtp.identity.associations import association_pb2, signature_pb2
from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core.crypto import SignatureError, SigningKey, blockchain_proof_digest
from xnode.core.cursors import Cursor
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    check_depends_on,
    envelope_signer,
    originate,
    parse_originator_envelope,
    validate_payer_envelope,
)
from xnode.core.errors import Reason, Rejected

NODE = 100
PAYER = SigningKey((7).to_bytes(32, "big"))
NODE_KEY = SigningKey((9).to_bytes(32, "big"))
GROUP = bytes(range(16))


def _payer(client: envelopes_pb2.ClientEnvelope, target: int = NODE) -> envelopes_pb2.PayerEnvelope:
    return build_payer_envelope(client, PAYER, target)


def _rejected(payer: envelopes_pb2.PayerEnvelope) -> Rejected:
    with pytest.raises(Rejected) as err:
        validate_payer_envelope(payer, NODE)
    return err.value


def test_valid_group_message() -> None:
    valid = validate_payer_envelope(_payer(group_message_envelope(GROUP, b"hi")), NODE)
    assert valid.payer_address == PAYER.address
    assert valid.topic.raw == b"\x00" + GROUP
    assert valid.payload == "group_message"


def test_undecodable_client_envelope() -> None:
    payer = _payer(group_message_envelope(GROUP, b"hi"))
    payer.unsigned_client_envelope = b"\xff\xff\xff"
    assert _rejected(payer).reason is Reason.MALFORMED


def test_missing_payload() -> None:
    client = envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(target_topic=b"\x00" + GROUP)
    )
    error = _rejected(_payer(client))
    assert error.reason is Reason.MISSING_PAYLOAD


def test_empty_unsigned_envelope() -> None:
    assert _rejected(envelopes_pb2.PayerEnvelope()).reason is Reason.MISSING_PAYLOAD


def test_wrong_target_originator() -> None:
    error = _rejected(_payer(group_message_envelope(GROUP, b"hi"), target=200))
    assert error.reason is Reason.WRONG_ORIGINATOR
    assert "200 is not this node (100)" in str(error)


def test_target_in_aad_only_is_accepted_when_it_is_this_node() -> None:
    client = group_message_envelope(GROUP, b"hi")
    client.aad.target_originator = NODE
    valid = validate_payer_envelope(_payer(client, target=0), NODE)
    assert valid.target_originator == NODE


def test_conflicting_targets() -> None:
    client = group_message_envelope(GROUP, b"hi")
    client.aad.target_originator = 300
    assert _rejected(_payer(client)).reason is Reason.WRONG_ORIGINATOR


def test_topic_kind_must_match_payload() -> None:
    client = group_message_envelope(GROUP, b"hi")
    client.aad.target_topic = b"\x01" + b"k" * 32  # a welcome topic
    error = _rejected(_payer(client))
    assert error.reason is Reason.TOPIC_MISMATCH
    assert "WELCOME_MESSAGES does not match payload group_message" in str(error)


INSTALLATION = bytes(range(32))


def _welcome(welcome: mls_pb2.WelcomeMessageInput) -> envelopes_pb2.ClientEnvelope:
    return envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(target_topic=b"\x01" + INSTALLATION),
        welcome_message=welcome,
    )


def _pointer(installation_key: bytes, pointer: bytes) -> mls_pb2.WelcomeMessageInput:
    return mls_pb2.WelcomeMessageInput(
        welcome_pointer=mls_pb2.WelcomeMessageInput.WelcomePointer(
            installation_key=installation_key,
            welcome_pointer=pointer,
            hpke_public_key=b"k" * 1216,
            wrapper_algorithm=mls_pb2.WELCOME_POINTER_WRAPPER_ALGORITHM_XWING_MLKEM_768_DRAFT_6,
        )
    )


def test_a_welcome_pointer_to_the_topics_installation_is_accepted() -> None:
    """What libxmtp sends each installation when one commit welcomes several."""
    valid = validate_payer_envelope(_payer(_welcome(_pointer(INSTALLATION, b"p" * 90))), NODE)
    assert valid.payload == "welcome_message"
    assert valid.topic.raw == b"\x01" + INSTALLATION


@pytest.mark.parametrize(
    ("welcome", "reason", "detail"),
    [
        (
            _pointer(bytes(32), b"p"),
            Reason.TOPIC_MISMATCH,
            "welcome_message.welcome_pointer.installation_key " + "00" * 32,
        ),
        (_pointer(INSTALLATION, b""), Reason.INVALID_PAYLOAD, "has no encrypted content"),
        (
            mls_pb2.WelcomeMessageInput(
                v1=mls_pb2.WelcomeMessageInput.V1(installation_key=INSTALLATION)
            ),
            Reason.INVALID_PAYLOAD,
            "welcome_message.v1 has no encrypted content",
        ),
        (mls_pb2.WelcomeMessageInput(), Reason.INVALID_PAYLOAD, "neither v1 nor welcome_pointer"),
    ],
)
def test_a_welcome_pointer_or_v1_without_content_or_for_another_installation_is_refused(
    welcome: mls_pb2.WelcomeMessageInput, reason: Reason, detail: str
) -> None:
    error = _rejected(_payer(_welcome(welcome)))
    assert error.reason is reason
    assert detail in str(error)


@pytest.mark.parametrize(("topic", "message"), [(b"", "empty"), (b"\x00" + b"g" * 128, "limit")])
def test_bad_topic(topic: bytes, message: str) -> None:
    client = group_message_envelope(GROUP, b"hi")
    client.aad.target_topic = topic
    error = _rejected(_payer(client))
    assert error.reason is Reason.BAD_TOPIC and message in str(error)


def test_missing_payer_signature() -> None:
    payer = _payer(group_message_envelope(GROUP, b"hi"))
    payer.ClearField("payer_signature")
    error = _rejected(payer)
    assert error.reason is Reason.BAD_SIGNATURE and "missing" in str(error)


def test_garbage_payer_signature() -> None:
    payer = _payer(group_message_envelope(GROUP, b"hi"))
    payer.payer_signature.bytes = b"\x01" * 10
    assert _rejected(payer).reason is Reason.BAD_SIGNATURE


def test_signature_for_another_target_recovers_a_different_payer() -> None:
    """A payer signature binds the target: replaying it to another node changes the payer."""
    payer = _payer(group_message_envelope(GROUP, b"hi"), target=200)
    payer.target_originator = NODE
    valid = validate_payer_envelope(payer, NODE)
    assert valid.payer_address != PAYER.address


def test_identity_update_inbox_must_match_topic() -> None:
    inbox = b"\x11" * 32
    client = envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(target_topic=b"\x02" + inbox),
        identity_update=association_pb2.IdentityUpdate(
            inbox_id=(b"\x22" * 32).hex(),
            actions=[
                association_pb2.IdentityAction(
                    create_inbox=association_pb2.CreateInbox(
                        initial_identifier="0xabc",
                        initial_identifier_signature=signature_pb2.Signature(
                            erc_191=signature_pb2.RecoverableEcdsaSignature(bytes=b"s")
                        ),
                    )
                )
            ],
        ),
    )
    assert _rejected(_payer(client)).reason is Reason.TOPIC_MISMATCH


def test_empty_group_message_is_invalid_payload() -> None:
    client = envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(target_topic=b"\x00" + GROUP),
        group_message=mls_pb2.GroupMessageInput(v1=mls_pb2.GroupMessageInput.V1()),
    )
    assert _rejected(_payer(client)).reason is Reason.INVALID_PAYLOAD


def test_depends_on_ahead_reports_the_node_cursor() -> None:
    client = group_message_envelope(GROUP, b"hi", depends_on=Cursor({200: 5}))
    valid = validate_payer_envelope(_payer(client), NODE)
    check_depends_on(valid, Cursor({200: 5}))  # caught up: fine
    with pytest.raises(Rejected) as err:
        check_depends_on(valid, Cursor({200: 4, 100: 9}))
    assert err.value.reason is Reason.DEPENDS_ON_AHEAD
    assert err.value.cursor == Cursor({200: 4, 100: 9})
    assert "200:5" in str(err.value)


@settings(max_examples=25, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=512),
    seq=st.integers(1, 2**63),
    ns=st.integers(0, 2**62),
    retention=st.integers(0, 3650),
)
def test_originated_envelope_round_trips(data: bytes, seq: int, ns: int, retention: int) -> None:
    payer = build_payer_envelope(group_message_envelope(GROUP, data), PAYER, NODE, retention)
    valid = validate_payer_envelope(payer, NODE)
    signed = originate(valid, NODE, seq, ns, NODE_KEY)
    parsed = parse_originator_envelope(signed.raw)
    assert (parsed.originator_node_id, parsed.sequence_id, parsed.originator_ns) == (NODE, seq, ns)
    assert parsed.payer_envelope == payer
    assert parsed.expiry == signed.expiry
    assert parsed.signer_public_key() == NODE_KEY.public_key
    assert parsed.topic() == b"\x00" + GROUP


def test_an_indexed_envelope_pickles_with_every_field() -> None:
    env = IndexedEnvelope(100, 7, 123, b"topic", 0, None, b"raw", b"leaf", 5, 6)
    back = pickle.loads(pickle.dumps(env, protocol=pickle.HIGHEST_PROTOCOL))
    assert dataclasses.astuple(back) == dataclasses.astuple(env)
    assert back.leaf == b"leaf"  # not compared by ==


def _originated() -> envelopes_pb2.OriginatorEnvelope:
    payer = validate_payer_envelope(_payer(group_message_envelope(GROUP, b"m")), NODE)
    raw = originate(payer, NODE, 1, 1_700_000_000 * 10**9, NODE_KEY).raw
    return envelopes_pb2.OriginatorEnvelope.FromString(raw)


def test_the_signer_of_an_originated_envelope_is_its_originator() -> None:
    assert envelope_signer(_originated()) == NODE_KEY.public_key


def test_the_signer_of_a_chain_payload_is_the_node_that_vouched_for_it() -> None:
    unsigned = _originated().unsigned_originator_envelope
    transaction = b"\x07" * 32
    vouched = envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned,
        blockchain_proof=envelopes_pb2.BlockchainProof(
            transaction_hash=transaction,
            node_signature=signature_pb2.RecoverableEcdsaSignature(
                bytes=PAYER.sign(blockchain_proof_digest(unsigned, transaction))
            ),
        ),
    )
    assert envelope_signer(vouched) == PAYER.public_key
    vouched.blockchain_proof.transaction_hash = b"\x08" * 32  # another transaction
    assert envelope_signer(vouched) != PAYER.public_key


def test_an_envelope_without_proof_has_no_signer() -> None:
    bare = envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=_originated().unsigned_originator_envelope
    )
    with pytest.raises(SignatureError, match="neither an originator signature nor"):
        envelope_signer(bare)
