"""Chain events become OriginatorEnvelopes with BlockchainProofs; malformed ones are refused."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from eth_abi.abi import encode
from web3 import Web3

from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.chain import abi
from xnode.chain.contracts import load_artifact
from xnode.client.node import group_message_envelope
from xnode.core.chain_payloads import (
    ChainEvent,
    MalformedPayload,
    build_chain_payload,
    vouches_for,
)
from xnode.core.crypto import SigningKey, blockchain_proof_digest, recover_public_key
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.mls import ContentType, WireFormat, encode_framing
from xnode.core.topics import Topic, TopicKind

KEY = SigningKey((5).to_bytes(32, "big"))
GROUP = bytes(range(16))
INBOX = bytes(range(32))
TX = bytes([7]) * 32
COMMIT = encode_framing(WireFormat.PUBLIC_MESSAGE, GROUP, 3, ContentType.COMMIT, b"c")


def _event(originator: int, payload: bytes, key: bytes | None = None) -> ChainEvent:
    return ChainEvent(
        originator=originator,
        sequence_id=42,
        key=key if key is not None else (GROUP if originator == 0 else INBOX),
        payload=payload,
        block_number=10,
        block_hash=b"\x01" * 32,
        transaction_hash=TX,
        log_index=0,
    )


def _update() -> association_pb2.IdentityUpdate:
    action = association_pb2.IdentityAction(
        create_inbox=association_pb2.CreateInbox(initial_identifier="0x" + "11" * 20)
    )
    return association_pb2.IdentityUpdate(actions=[action], inbox_id=INBOX.hex())


def test_a_client_envelope_is_reused_byte_for_byte_and_proven() -> None:
    client = group_message_envelope(GROUP, COMMIT).SerializeToString()
    payload = build_chain_payload(_event(0, client), 1_700_000_000, KEY)
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(payload.raw)
    parsed = parse_originator_envelope(payload.raw)
    assert parsed.payer_envelope.unsigned_client_envelope == client
    assert (parsed.originator_node_id, parsed.sequence_id, parsed.expiry) == (0, 42, 0)
    assert parsed.originator_ns == payload.originator_ns == 1_700_000_000 * 10**9
    assert parsed.transaction_hash == TX
    digest = blockchain_proof_digest(envelope.unsigned_originator_envelope, TX)
    assert recover_public_key(envelope.blockchain_proof.node_signature.bytes, digest) == (
        KEY.public_key
    )
    assert payload.topic == Topic(TopicKind.GROUP_MESSAGES, GROUP).raw
    assert payload.identity_update is None


def test_bare_mls_messages_and_identity_updates_are_wrapped_for_their_topic() -> None:
    message = parse_originator_envelope(build_chain_payload(_event(0, COMMIT), 1, KEY).raw)
    client = envelopes_pb2.ClientEnvelope.FromString(
        message.payer_envelope.unsigned_client_envelope
    )
    assert client.aad.target_topic == b"\x00" + GROUP
    assert client.group_message.v1.data == COMMIT
    payload = build_chain_payload(_event(1, _update().SerializeToString()), 1, KEY)
    assert payload.identity_update == _update()
    assert payload.topic == b"\x02" + INBOX


def _other_topic() -> bytes:
    return group_message_envelope(bytes(16), COMMIT).SerializeToString()


@pytest.mark.parametrize(
    ("originator", "payload", "key", "error"),
    [
        (0, b"\xff\xfe garbage", None, "neither a client envelope nor an MLS message"),
        (0, _other_topic(), None, "targets topic"),
        (1, group_message_envelope(GROUP, COMMIT).SerializeToString(), None, "targets topic"),
        (1, b"\xff", None, "neither a client envelope nor an identity update"),
        (
            1,
            association_pb2.IdentityUpdate(inbox_id=INBOX.hex()).SerializeToString(),
            None,
            "no actions",
        ),
        (1, _update().SerializeToString(), bytes(32), "names inbox"),
        (0, COMMIT, bytes(15), "expected 16"),
    ],
)
def test_malformed_payloads(originator: int, payload: bytes, key: bytes | None, error: str) -> None:
    with pytest.raises(MalformedPayload, match=error):
        build_chain_payload(_event(originator, payload, key), 1, KEY)


def _log(topic0: bytes, key: bytes, seq: int, data: bytes) -> dict[str, object]:
    return {
        "address": "0x" + "11" * 20,
        "topics": ["0x" + topic0.hex(), "0x" + key.hex(), "0x" + seq.to_bytes(32, "big").hex()],
        "data": "0x" + data.hex(),
        "blockNumber": "0x10",
        "blockHash": "0x" + "22" * 32,
        "blockTimestamp": "0x64",
        "transactionHash": "0x" + "33" * 32,
        "logIndex": "0x2",
    }


def test_decode_logs() -> None:
    group_key = GROUP + bytes(16)  # bytes16 topics are left-aligned in 32 bytes
    event = abi.decode_payload_log(_log(abi.MESSAGE_SENT, group_key, 9, encode(["bytes"], [b"m"])))
    assert (event.originator, event.key, event.sequence_id, event.payload) == (0, GROUP, 9, b"m")
    assert (event.block_number, event.block_timestamp, event.log_index) == (16, 100, 2)
    update = abi.decode_payload_log(
        _log(abi.IDENTITY_UPDATE_CREATED, INBOX, 1, encode(["bytes"], [b"u"]))
    )
    assert (update.originator, update.key) == (1, INBOX)
    with pytest.raises(MalformedPayload, match="does not decode"):
        abi.decode_payload_log(_log(abi.MESSAGE_SENT, group_key, 1, b"\x00" * 7))
    with pytest.raises(MalformedPayload, match="unexpected log topics"):
        abi.decode_payload_log(_log(abi.NODE_ADDED, group_key, 1, b""))


@pytest.mark.parametrize(
    ("name", "function", "key", "build"),
    [
        ("GroupMessages", "addMessage", GROUP, abi.add_message_data),
        ("IdentityUpdates", "addIdentityUpdate", INBOX, abi.add_identity_update_data),
    ],
)
def test_call_data_matches_the_artifacts_abi(
    name: str, function: str, key: bytes, build: Any
) -> None:
    contract = Web3().eth.contract(abi=load_artifact(name).abi)
    expected = contract.encode_abi(function, args=[key, b"payload"])
    assert "0x" + build(key, b"payload").hex() == expected


def test_a_registered_nodes_copy_vouches_for_a_read_only_nodes_payload() -> None:
    """A read-only node's own proof is by a key in no registry; a registered node's copy of
    the same payload (same content, same transaction) is what it serves instead."""
    registered, stranger = KEY, SigningKey.generate()
    keys = {registered.public_key}
    own = build_chain_payload(_event(0, COMMIT), 1, stranger).raw
    theirs = build_chain_payload(_event(0, COMMIT), 1, registered).raw
    assert own != theirs and vouches_for(own, theirs, keys)
    assert not vouches_for(own, own, keys)  # signed by no registry key
    other_content = build_chain_payload(_event(0, COMMIT), 2, registered).raw  # another time
    assert not vouches_for(own, other_content, keys)
    moved = dataclasses.replace(_event(0, COMMIT), transaction_hash=bytes([8]) * 32)
    assert not vouches_for(own, build_chain_payload(moved, 1, registered).raw, keys)
    assert not vouches_for(own, b"\xff not an envelope", keys)
