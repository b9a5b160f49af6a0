"""Chain events become OriginatorEnvelopes (XIP-49 3.2.1): originator 0 (GroupMessages) or 1
(IdentityUpdates), the contract's sequence id, the block's timestamp, no expiry, and a
BlockchainProof (transaction hash and this node's signature). No I/O here.

The event's bytes are normally the payer's signed PayerEnvelope a node's publisher sent, so
the indexed envelope carries exactly what the payer signed (signature, target originator,
retention; XIP-49 3.3.4.1) and the payer can be billed. Older forms are still accepted: a
serialized ClientEnvelope (kept as the PayerEnvelope's `unsigned_client_envelope`, with no
payer), and a bare MLS message (group messages) or a bare IdentityUpdate, wrapped in a
ClientEnvelope for their topic. Anything else is malformed and skipped by the indexer.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from xmtp.identity.associations import association_pb2, signature_pb2
from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR, IDENTITY_UPDATES_ORIGINATOR
from xnode.core.crypto import (
    SignatureError,
    SigningKey,
    address_of,
    blockchain_proof_digest,
    payer_digest,
    recover_public_key,
)
from xnode.core.envelopes import envelope_signer
from xnode.core.mls import is_mls_message
from xnode.core.topics import Topic, TopicKind

_KIND_OF_ORIGINATOR = {
    GROUP_MESSAGES_ORIGINATOR: TopicKind.GROUP_MESSAGES,
    IDENTITY_UPDATES_ORIGINATOR: TopicKind.IDENTITY_UPDATES,
}
_PAYLOAD_OF_ORIGINATOR = {
    GROUP_MESSAGES_ORIGINATOR: "group_message",
    IDENTITY_UPDATES_ORIGINATOR: "identity_update",
}


class MalformedPayload(ValueError):
    """An event whose bytes cannot become an envelope for its topic."""


@dataclass(frozen=True, slots=True)
class ChainEvent:
    """One MessageSent or IdentityUpdateCreated log, decoded."""

    originator: int
    sequence_id: int
    key: bytes  # groupId (16 bytes) or inboxId (32 bytes)
    payload: bytes
    block_number: int
    block_hash: bytes
    transaction_hash: bytes
    log_index: int
    block_timestamp: int | None = None

    @property
    def topic(self) -> Topic:
        return Topic(_KIND_OF_ORIGINATOR[self.originator], self.key)


@dataclass(frozen=True, slots=True)
class SkippedEvent:
    """A malformed event: recorded, logged once, passed over."""

    contract: str
    block_number: int
    block_hash: bytes
    transaction_hash: bytes
    log_index: int
    sequence_id: int | None
    reason: str
    data: bytes | None


@dataclass(frozen=True, slots=True)
class ChainPayload:
    """An indexed event as the store keeps it."""

    event: ChainEvent
    topic: bytes
    originator_ns: int
    raw: bytes  # the serialized OriginatorEnvelope
    identity_update: association_pb2.IdentityUpdate | None
    payer_address: bytes | None = None  # None for the older forms, which carry no payer


def _as_client_envelope(payload: bytes) -> envelopes_pb2.ClientEnvelope | None:
    """The payload as a ClientEnvelope, when it is one (it has aad and a payload)."""
    client = envelopes_pb2.ClientEnvelope()
    try:
        client.ParseFromString(payload)
    except DecodeError:
        return None
    if not client.HasField("aad") or client.WhichOneof("payload") is None:
        return None
    return client


def _check_client_envelope(client: envelopes_pb2.ClientEnvelope, event: ChainEvent) -> None:
    topic = event.topic
    if client.aad.target_topic != topic.raw:
        raise MalformedPayload(
            f"client envelope targets topic {client.aad.target_topic.hex()}, "
            f"the event's is {topic.raw.hex()}"
        )
    expected = _PAYLOAD_OF_ORIGINATOR[event.originator]
    if client.WhichOneof("payload") != expected:
        raise MalformedPayload(f"client envelope carries {client.WhichOneof('payload')}")
    if expected == "identity_update":
        _check_inbox(client.identity_update, event.key)


def _check_inbox(update: association_pb2.IdentityUpdate, inbox: bytes) -> None:
    if not update.actions:
        raise MalformedPayload("identity update has no actions")
    try:
        named = bytes.fromhex(update.inbox_id.removeprefix("0x"))
    except ValueError:
        raise MalformedPayload("identity update inbox_id is not hex") from None
    if named != inbox:
        raise MalformedPayload(f"identity update names inbox {update.inbox_id}")


def _wrap(event: ChainEvent) -> envelopes_pb2.ClientEnvelope:
    """A ClientEnvelope around a bare MLS message or IdentityUpdate."""
    aad = envelopes_pb2.AuthenticatedData(target_topic=event.topic.raw)
    if event.originator == GROUP_MESSAGES_ORIGINATOR:
        if not is_mls_message(event.payload):
            raise MalformedPayload("neither a client envelope nor an MLS message")
        v1 = mls_pb2.GroupMessageInput.V1(data=event.payload)
        return envelopes_pb2.ClientEnvelope(aad=aad, group_message=mls_pb2.GroupMessageInput(v1=v1))
    update = association_pb2.IdentityUpdate()
    try:
        update.ParseFromString(event.payload)
    except DecodeError:
        raise MalformedPayload("neither a client envelope nor an identity update") from None
    _check_inbox(update, event.key)
    return envelopes_pb2.ClientEnvelope(aad=aad, identity_update=update)


def client_envelope_of(event: ChainEvent) -> tuple[bytes, envelopes_pb2.ClientEnvelope]:
    """The serialized ClientEnvelope for the event (its own bytes when they are one)."""
    if event.originator not in _KIND_OF_ORIGINATOR:
        raise MalformedPayload(f"originator {event.originator} is not a chain originator")
    expected_len = 16 if event.originator == GROUP_MESSAGES_ORIGINATOR else 32
    if len(event.key) != expected_len:
        raise MalformedPayload(f"event key is {len(event.key)} bytes, expected {expected_len}")
    client = _as_client_envelope(event.payload)
    if client is not None:
        _check_client_envelope(client, event)
        return event.payload, client
    wrapped = _wrap(event)
    return wrapped.SerializeToString(), wrapped


@dataclass(frozen=True, slots=True)
class SignedPayer:
    raw: bytes  # the PayerEnvelope as the payer signed it
    client: envelopes_pb2.ClientEnvelope
    address: bytes


def signed_payer_envelope(event: ChainEvent) -> SignedPayer | None:
    """The event's bytes as a payer's signed PayerEnvelope for the event's topic, or None.

    Strict on purpose: a ClientEnvelope's bytes can parse as a PayerEnvelope too, so only a
    recoverable payer signature over a client envelope for this topic counts."""
    payer = envelopes_pb2.PayerEnvelope()
    try:
        payer.ParseFromString(event.payload)
    except DecodeError:
        return None
    if not payer.HasField("payer_signature") or len(payer.payer_signature.bytes) != 65:
        return None
    client = _as_client_envelope(payer.unsigned_client_envelope)
    if client is None:
        return None
    try:
        digest = payer_digest(payer.target_originator, payer.unsigned_client_envelope)
        address = address_of(recover_public_key(payer.payer_signature.bytes, digest))
    except SignatureError:
        return None
    _check_client_envelope(client, event)
    return SignedPayer(event.payload, client, address)


def payer_envelope_of(
    event: ChainEvent,
) -> tuple[bytes, envelopes_pb2.ClientEnvelope, bytes | None]:
    """The PayerEnvelope bytes the indexed envelope carries, its client envelope, and the
    payer's address (None for the older forms)."""
    if event.originator in _KIND_OF_ORIGINATOR:
        signed = signed_payer_envelope(event)
        if signed is not None:
            return signed.raw, signed.client, signed.address
    client_bytes, client = client_envelope_of(event)
    unsigned = envelopes_pb2.PayerEnvelope(unsigned_client_envelope=client_bytes)
    return unsigned.SerializeToString(), client, None


def build_chain_payload(event: ChainEvent, timestamp: int, key: SigningKey) -> ChainPayload:
    """Signs the envelope for `event` mined in a block with `timestamp` (seconds)."""
    payer_bytes, client, payer_address = payer_envelope_of(event)
    originator_ns = timestamp * 1_000_000_000
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=event.originator,
        originator_sequence_id=event.sequence_id,
        originator_ns=originator_ns,
        payer_envelope_bytes=payer_bytes,
    ).SerializeToString()
    signature = key.sign(blockchain_proof_digest(unsigned, event.transaction_hash))
    raw = envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned,
        blockchain_proof=envelopes_pb2.BlockchainProof(
            transaction_hash=event.transaction_hash,
            node_signature=signature_pb2.RecoverableEcdsaSignature(bytes=signature),
        ),
    ).SerializeToString()
    update = client.identity_update if client.HasField("identity_update") else None
    return ChainPayload(event, event.topic.raw, originator_ns, raw, update, payer_address)


class NotVouched(Exception):
    """No registered node serves its signed copy of a chain payload yet."""


def vouches_for(own_raw: bytes, other_raw: bytes, registry_keys: Collection[bytes]) -> bool:
    """Whether `other_raw` is the chain payload `own_raw` (the same signed content and
    transaction) with a blockchain proof by a registry node's key.

    Clients accept a chain payload only when its node_signature is by a registry node
    (XIP-49 3.3.4, query rule 2). A read-only node is in no registry, so it serves a registered
    node's copy of each payload it indexed: the content is the chain's, which its own index
    checks, and the proof is one every client can verify."""
    try:
        own = envelopes_pb2.OriginatorEnvelope.FromString(own_raw)
        other = envelopes_pb2.OriginatorEnvelope.FromString(other_raw)
    except DecodeError:
        return False
    if other.WhichOneof("proof") != "blockchain_proof":
        return False
    unsigned, tx = own.unsigned_originator_envelope, own.blockchain_proof.transaction_hash
    same_tx = other.blockchain_proof.transaction_hash == tx
    if other.unsigned_originator_envelope != unsigned or not same_tx:
        return False
    try:
        return envelope_signer(other) in registry_keys
    except SignatureError:
        return False
