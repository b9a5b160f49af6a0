"""Payer and originator envelopes: parsing, the originator's validation rules (XIP-49 3.3.4)
and signing (3.2.1). Pure: protobuf values in, protobuf bytes out."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import DecodeError

from xmtp.identity.associations import association_pb2, signature_pb2
from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import (
    SignatureError,
    SigningKey,
    address_of,
    blockchain_proof_digest,
    originator_digest,
    payer_digest,
    recover_public_key,
)
from xnode.core.cursors import Cursor, out_of_range
from xnode.core.errors import Reason, Rejected
from xnode.core.fees import NO_FEES, Fees
from xnode.core.key_packages import LIFETIME_SKEW_S, STAMP_GRACE_S, parse_key_package
from xnode.core.leaves import leaf_v2
from xnode.core.mls import FramingHeader, MlsError, parse_group_message
from xnode.core.retention import expiry_unixtime
from xnode.core.topics import KIND_OF_PAYLOAD, Topic, TopicError

MAX_CURSOR_ENTRIES = 1024
_NO_CURSOR = Cursor()


def cursor_from_proto(message: envelopes_pb2.Cursor, where: str = "cursor") -> Cursor:
    """`where` names the field for the client (e.g. `query.last_seen`)."""
    entries = message.node_id_to_sequence_id
    if not entries:  # most depend on nothing: one shared Cursor, no map views to build
        return _NO_CURSOR
    if len(entries) > MAX_CURSOR_ENTRIES:
        raise Rejected(
            Reason.LIMIT_EXCEEDED,
            f"{where}: cursor has {len(entries)} entries, the limit is {MAX_CURSOR_ENTRIES}",
        )
    for node_id, sequence_id in entries.items():
        problem = out_of_range(node_id, sequence_id)
        if problem:
            raise Rejected(Reason.MALFORMED, f"{where}: {problem}")
    return Cursor(dict(entries))


def cursor_to_proto(cursor: Cursor) -> envelopes_pb2.Cursor:
    return envelopes_pb2.Cursor(node_id_to_sequence_id=cursor.to_dict())


@dataclass(frozen=True, slots=True)
class ValidPayerEnvelope:
    """A payer envelope that passed every stateless rule; `raw` is what gets signed."""

    raw: bytes
    topic: Topic
    payload: str
    payer_address: bytes
    target_originator: int
    depends_on: Cursor
    retention_days: int
    client_envelope: envelopes_pb2.ClientEnvelope
    # A group message's MLS framing: commits and application messages are told apart by it.
    framing: FramingHeader | None = None
    # What the payer signed (core.crypto.payer_digest): the same for a replay of this
    # envelope with another retention, which the signature does not cover.
    payer_digest: bytes = b""

    @property
    def is_commit(self) -> bool:
        return self.framing is not None and self.framing.is_commit

    @property
    def needs_chain(self) -> bool:
        """Identity updates and MLS commits need the chain's total order (XIP-49 2.1)."""
        if self.payload == "identity_update":
            return True
        return self.payload == "group_message" and self.is_commit

    def expiry(self, originator_ns: int) -> int:
        return expiry_unixtime(self.topic.kind, self.retention_days, originator_ns)


class Originable(Protocol):
    """What signing needs of a payer envelope: a ValidPayerEnvelope, or its part another
    worker of the node handed over (xnode.core.sequencer_wire.Payload)."""

    @property
    def raw(self) -> bytes: ...
    @property
    def topic(self) -> Topic: ...
    @property
    def payer_address(self) -> bytes: ...
    @property
    def retention_days(self) -> int: ...
    @property
    def payer_digest(self) -> bytes: ...
    def expiry(self, originator_ns: int) -> int: ...


def _decode_client_envelope(raw: bytes) -> envelopes_pb2.ClientEnvelope:
    client = envelopes_pb2.ClientEnvelope()
    try:
        client.ParseFromString(raw)
    except DecodeError as exc:
        raise Rejected(
            Reason.MALFORMED, f"unsigned_client_envelope does not decode: {exc}"
        ) from None
    return client


def _check_payload(
    client: envelopes_pb2.ClientEnvelope, topic: Topic, at_s: int, until_s: int
) -> tuple[str, FramingHeader | None]:
    payload: str | None = client.WhichOneof("payload")
    if payload is None:
        raise Rejected(Reason.MISSING_PAYLOAD, "client envelope has no payload")
    expected = KIND_OF_PAYLOAD[payload]
    if topic.kind is not expected:
        raise Rejected(
            Reason.TOPIC_MISMATCH,
            f"topic kind {topic.kind.name} does not match payload {payload} "
            f"(expected kind byte {int(expected)})",
        )
    if payload == "group_message":
        return payload, _check_group_message(client.group_message.v1.data, topic)
    if payload == "welcome_message":
        _check_welcome(client.welcome_message, topic)
    elif payload == "upload_key_package":
        _check_key_package(
            client.upload_key_package.key_package.key_package_tls_serialized,
            topic,
            at_s,
            until_s,
        )
    elif payload == "identity_update":
        _check_identity_update(client.identity_update, topic)
    return payload, None


def _check_group_message(data: bytes, topic: Topic) -> FramingHeader:
    """An MLS PublicMessage or PrivateMessage (RFC 9420 section 6) of the topic's group."""
    where = "group_message.v1.data"
    if not data:
        raise Rejected(Reason.INVALID_PAYLOAD, "group message has no v1 data")
    try:
        framing = parse_group_message(data)
    except MlsError as exc:
        raise Rejected(
            Reason.INVALID_PAYLOAD, f"{where}: not an MLS group message: {exc}"
        ) from None
    if framing.group_id != topic.identifier:
        raise Rejected(
            Reason.TOPIC_MISMATCH,
            f"{where}: MLS group_id {framing.group_id.hex()} is not the topic's group "
            f"{topic.identifier.hex()}",
        )
    return framing


def _check_welcome(welcome: mls_pb2.WelcomeMessageInput, topic: Topic) -> None:
    """libxmtp sends a Welcome encrypted to the installation (HPKE), or, when a commit
    welcomes several installations, the Welcome once under a symmetric key on a topic of its
    own and to each installation a pointer to it encrypted to that installation: the
    ciphertext cannot be checked, only that there is one and where it is addressed."""
    version = welcome.WhichOneof("version")
    if version is None:
        raise Rejected(Reason.INVALID_PAYLOAD, "welcome message has neither v1 nor welcome_pointer")
    where = f"welcome_message.{version}"
    if version == "v1":
        content = welcome.v1.data
        installation_key = welcome.v1.installation_key
    else:
        content = welcome.welcome_pointer.welcome_pointer
        installation_key = welcome.welcome_pointer.installation_key
    if not content:
        raise Rejected(Reason.INVALID_PAYLOAD, f"{where} has no encrypted content")
    if installation_key != topic.identifier:
        raise Rejected(
            Reason.TOPIC_MISMATCH,
            f"{where}.installation_key {installation_key.hex()} is not the topic's "
            f"installation {topic.identifier.hex()}",
        )


def _check_key_package(data: bytes, topic: Topic, at_s: int, until_s: int) -> None:
    where = "upload_key_package.key_package.key_package_tls_serialized"
    if not data:
        raise Rejected(Reason.INVALID_PAYLOAD, "key package upload has no key package")
    try:
        package = parse_key_package(data, at_s, until_s)
    except MlsError as exc:
        raise Rejected(Reason.INVALID_PAYLOAD, f"{where}: {exc}") from None
    if package.signature_key != topic.identifier:
        raise Rejected(
            Reason.TOPIC_MISMATCH,
            f"{where}: the leaf's signature key {package.signature_key.hex()} is not the "
            f"topic's installation {topic.identifier.hex()}",
        )


def _check_identity_update(update: association_pb2.IdentityUpdate, topic: Topic) -> None:
    if not update.actions:
        raise Rejected(Reason.INVALID_PAYLOAD, "identity update has no actions")
    try:
        inbox = bytes.fromhex(update.inbox_id)
    except ValueError:
        raise Rejected(Reason.INVALID_PAYLOAD, "identity update inbox_id is not hex") from None
    if inbox != topic.identifier:
        raise Rejected(Reason.TOPIC_MISMATCH, "identity update inbox_id differs from topic")


def _target_of(payer: envelopes_pb2.PayerEnvelope, aad: envelopes_pb2.AuthenticatedData) -> int:
    both = payer.target_originator and aad.target_originator
    if both and payer.target_originator != aad.target_originator:
        raise Rejected(
            Reason.WRONG_ORIGINATOR,
            f"payer envelope targets {payer.target_originator} but its authenticated "
            f"data targets {aad.target_originator}",
        )
    return payer.target_originator or aad.target_originator


def _payer_address(payer: envelopes_pb2.PayerEnvelope) -> tuple[bytes, bytes]:
    """The payer's address and the digest it signed."""
    if not payer.HasField("payer_signature"):
        raise Rejected(Reason.BAD_SIGNATURE, "payer_signature is missing")
    digest = payer_digest(payer.target_originator, payer.unsigned_client_envelope)
    try:
        return address_of(recover_public_key(payer.payer_signature.bytes, digest)), digest
    except SignatureError as exc:
        raise Rejected(Reason.BAD_SIGNATURE, f"payer signature: {exc}") from None


def _payer_rules(
    payer: envelopes_pb2.PayerEnvelope, node_id: int, at_s: int, until_s: int
) -> tuple[envelopes_pb2.ClientEnvelope, int, Topic, str, FramingHeader | None, Cursor]:
    """The rules of validate_payer_envelope but the payer signature's, in its order; time-bound
    rules (key package lifetimes) hold from `at_s` until `until_s`."""
    if not payer.unsigned_client_envelope:
        raise Rejected(Reason.MISSING_PAYLOAD, "unsigned_client_envelope is empty")
    client = _decode_client_envelope(payer.unsigned_client_envelope)
    if not client.HasField("aad"):
        raise Rejected(Reason.MALFORMED, "client envelope has no authenticated data (aad)")
    aad = client.aad
    target = _target_of(payer, aad)
    if target != node_id:
        raise Rejected(
            Reason.WRONG_ORIGINATOR,
            f"target originator {target} is not this node ({node_id})"
            if target
            else f"target originator is not set (this node is {node_id})",
        )
    try:
        topic = Topic.parse(aad.target_topic)
    except TopicError as exc:
        raise Rejected(Reason.BAD_TOPIC, f"target_topic: {exc}") from None
    payload, framing = _check_payload(client, topic, at_s, until_s)
    depends_on = cursor_from_proto(aad.depends_on, "aad.depends_on")
    return client, target, topic, payload, framing, depends_on


def validate_payer_envelope(
    payer: envelopes_pb2.PayerEnvelope, node_id: int, now_s: int | None = None
) -> ValidPayerEnvelope:
    """The stateless rules of XIP-49 3.3.4 as the originator applies them at publish; the
    depends_on rule needs state, see below. The envelope's time is now (`now_s`, unix seconds,
    default the wall clock): the originator stamps it next, so a key package must still be
    valid STAMP_GRACE_S later."""
    now = int(time.time()) if now_s is None else now_s
    client, target, topic, payload, framing, depends_on = _payer_rules(
        payer, node_id, now, now + STAMP_GRACE_S
    )
    address, digest = _payer_address(payer)
    return ValidPayerEnvelope(
        raw=payer.SerializeToString(deterministic=True),
        topic=topic,
        payload=payload,
        payer_address=address,
        target_originator=target,
        depends_on=depends_on,
        retention_days=payer.message_retention_days,
        client_envelope=client,
        framing=framing,
        payer_digest=digest,
    )


def received_payer(
    payer: envelopes_pb2.PayerEnvelope, node_id: int, originator_ns: int
) -> tuple[bytes, bytes, int, Cursor]:
    """(topic, payer address, retention days, depends_on) of a payer envelope another
    originator signed at `originator_ns`, under the same rules and reasons as
    validate_payer_envelope. Verifying
    envelopes received from peers needs no more: no ValidPayerEnvelope and no second
    serialization, which a repair or catch-up would pay per envelope.

    Judged at the envelope's own signed time, never at the verifier's clock, so every node
    reaches the same verdict on any day (a key package valid when originated stays valid in
    a catch-up or an audit months later); the originator checked before stamping, hence
    LIFETIME_SKEW_S of slack after a lifetime's end as before its start."""
    at_s = originator_ns // NS_PER_SECOND
    rules = _payer_rules(payer, node_id, at_s, at_s - LIFETIME_SKEW_S)
    client, depends_on = rules[0], rules[-1]
    # Topic.parse accepted these bytes: they are the topic's raw form
    return (
        client.aad.target_topic,
        _payer_address(payer)[0],
        payer.message_retention_days,
        depends_on,
    )


def check_depends_on(envelope: ValidPayerEnvelope, node_cursor: Cursor) -> None:
    """XIP-49 3.3.4 2.3 and 3.2.3: refuse what depends on payloads this node has not seen."""
    ahead = node_cursor.lagging(envelope.depends_on)
    if ahead:
        listed = ", ".join(f"{n}:{s}" for n, s in sorted(ahead.items()))
        raise Rejected(
            Reason.DEPENDS_ON_AHEAD,
            f"depends_on is ahead of this node for originator:sequence {listed}; "
            f"node cursor is {node_cursor!r}",
            cursor=node_cursor,
        )


@dataclass(frozen=True, slots=True)
class StoredEnvelope:
    """An envelope as the store and live delivery carry it: its keys and its signed bytes."""

    originator_node_id: int
    sequence_id: int
    topic: bytes
    raw: bytes
    expiry: int = 0  # unix seconds, 0 = never; live delivery drops what has expired


@dataclass(frozen=True, slots=True)
class IndexedEnvelope:
    """A signed originator envelope with the columns the store indexes: one this node
    originated, or one received from a peer and verified (xnode.core.verification)."""

    originator_node_id: int
    sequence_id: int
    originator_ns: int
    topic: bytes
    expiry: int
    payer_address: bytes | None
    raw: bytes
    # the log leaf (xnode.core.leaves, format 2), when already computed
    leaf: bytes = field(default=b"", compare=False)
    # The fees the originator signed (fields 5 and 6), picodollars; usage accounting sums them
    base_fee: int = 0
    congestion_fee: int = 0
    # The originator's own sequence id its depends_on names at or after this one's: a
    # dependency it cannot have seen (CAUSAL_ORDERING, xnode.core.evidence); 0 when none
    depends_ahead: int = 0

    def stored(self) -> StoredEnvelope:
        return StoredEnvelope(
            self.originator_node_id, self.sequence_id, self.topic, self.raw, self.expiry
        )

    def __reduce__(self) -> tuple[type[IndexedEnvelope], tuple[int | bytes | None, ...]]:
        # Verified envelopes come back from the verifying processes pickled: the constructor
        # with the fields unpickles faster than a slots dataclass' generic state (which calls
        # dataclasses.fields() per object).
        return (
            IndexedEnvelope,
            (
                self.originator_node_id, self.sequence_id, self.originator_ns, self.topic,
                self.expiry, self.payer_address, self.raw, self.leaf, self.base_fee,
                self.congestion_fee, self.depends_ahead,
            ),
        )  # fmt: skip


def unsigned_originator(
    payer: Originable, node_id: int, sequence_id: int, originator_ns: int, fees: Fees = NO_FEES
) -> tuple[bytes, int]:
    expiry = payer.expiry(originator_ns)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=node_id,
        originator_sequence_id=sequence_id,
        originator_ns=originator_ns,
        payer_envelope_bytes=payer.raw,
        base_fee_picodollars=fees.base,
        congestion_fee_picodollars=fees.congestion,
        expiry_unixtime=expiry,
    ).SerializeToString()
    return unsigned, expiry


def signed_originator(
    payer: Originable,
    node_id: int,
    sequence_id: int,
    originator_ns: int,
    unsigned: bytes,
    expiry: int,
    signature: bytes,
    fees: Fees = NO_FEES,
    with_leaf: bool = True,
) -> IndexedEnvelope:
    raw = envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned,
        originator_signature=signature_pb2.RecoverableEcdsaSignature(bytes=signature),
    ).SerializeToString()
    return IndexedEnvelope(
        node_id,
        sequence_id,
        originator_ns,
        payer.topic.raw,
        expiry,
        payer.payer_address,
        raw,
        leaf_v2(unsigned, expiry) if with_leaf else b"",
        base_fee=fees.base,
        congestion_fee=fees.congestion,
    )


def originate(
    payer: Originable,
    node_id: int,
    sequence_id: int,
    originator_ns: int,
    key: SigningKey,
    fees: Fees = NO_FEES,
    with_leaf: bool = True,
) -> IndexedEnvelope:
    """`with_leaf` False: no log leaf hash (a node not committing its log)."""
    unsigned, expiry = unsigned_originator(payer, node_id, sequence_id, originator_ns, fees)
    signature = key.sign(originator_digest(unsigned))
    return signed_originator(
        payer, node_id, sequence_id, originator_ns, unsigned, expiry, signature, fees, with_leaf
    )


@dataclass(slots=True)
class ReceivedEnvelope:
    """An OriginatorEnvelope read from elsewhere (a peer, the store, a client tool). Not
    frozen: a frozen dataclass' __init__ sets each of its 11 fields through
    object.__setattr__, paid per envelope received from a peer; it holds a
    protobuf message, so it was never hashable anyway. Treat it as read-only."""

    raw: bytes
    unsigned_raw: bytes
    originator_node_id: int
    sequence_id: int
    originator_ns: int
    expiry: int
    payer_envelope: envelopes_pb2.PayerEnvelope
    payer_envelope_size: int
    fees: Fees
    signature: bytes | None
    transaction_hash: bytes | None

    def topic(self) -> bytes:
        client = envelopes_pb2.ClientEnvelope.FromString(
            self.payer_envelope.unsigned_client_envelope
        )
        return client.aad.target_topic

    def signer_public_key(self) -> bytes:
        """Recovers the originator's key; raises SignatureError when it cannot."""
        if self.signature is None:
            raise SignatureError("envelope carries no originator signature")
        return recover_public_key(self.signature, originator_digest(self.unsigned_raw))


def envelope_signer(envelope: envelopes_pb2.OriginatorEnvelope) -> bytes:
    """The key that vouched for an originator envelope: its originator's signature, or for a
    chain payload the indexing node's blockchain proof. Raises SignatureError."""
    unsigned = envelope.unsigned_originator_envelope
    proof = envelope.WhichOneof("proof")
    if proof == "originator_signature":
        signature = envelope.originator_signature.bytes
        return recover_public_key(signature, originator_digest(unsigned))
    if proof == "blockchain_proof":
        digest = blockchain_proof_digest(unsigned, envelope.blockchain_proof.transaction_hash)
        return recover_public_key(envelope.blockchain_proof.node_signature.bytes, digest)
    raise SignatureError("carries neither an originator signature nor a blockchain proof")


def parse_originator_envelope(raw: bytes) -> ReceivedEnvelope:
    try:
        envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
        payer = envelopes_pb2.PayerEnvelope.FromString(unsigned.payer_envelope_bytes)
    except DecodeError as exc:
        raise Rejected(Reason.MALFORMED, f"originator envelope does not decode: {exc}") from None
    proof = envelope.WhichOneof("proof")
    signature = envelope.originator_signature.bytes if proof == "originator_signature" else None
    tx = envelope.blockchain_proof.transaction_hash if proof == "blockchain_proof" else None
    return ReceivedEnvelope(
        raw=raw,
        unsigned_raw=envelope.unsigned_originator_envelope,
        originator_node_id=unsigned.originator_node_id,
        sequence_id=unsigned.originator_sequence_id,
        originator_ns=unsigned.originator_ns,
        expiry=unsigned.expiry_unixtime,
        payer_envelope=payer,
        payer_envelope_size=len(unsigned.payer_envelope_bytes),
        fees=Fees(unsigned.base_fee_picodollars, unsigned.congestion_fee_picodollars),
        signature=signature,
        transaction_hash=tx,
    )


def stored_twin(payer: Originable, stored_raw: bytes) -> IndexedEnvelope | None:
    """The originator envelope this node stored for `payer` (`stored_raw`, found by its payer
    digest) when it holds exactly these payer envelope bytes: a client's retry of a publish
    whose answer it lost, answered with what was stored. None when the stored payer
    envelope differs in what the signature does not cover (its retention)."""
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(stored_raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    if unsigned.payer_envelope_bytes != payer.raw:
        return None
    stored = parse_originator_envelope(stored_raw)
    return IndexedEnvelope(
        stored.originator_node_id,
        stored.sequence_id,
        stored.originator_ns,
        payer.topic.raw,
        stored.expiry,
        payer.payer_address,
        stored_raw,
        base_fee=stored.fees.base,
        congestion_fee=stored.fees.congestion,
    )


def build_payer_envelope(
    client: envelopes_pb2.ClientEnvelope,
    payer_key: SigningKey,
    target_originator: int,
    retention_days: int = 0,
) -> envelopes_pb2.PayerEnvelope:
    """What a payer does: serialize the client envelope and sign it for one originator."""
    unsigned = client.SerializeToString()
    signature = payer_key.sign(payer_digest(target_originator, unsigned))
    return envelopes_pb2.PayerEnvelope(
        unsigned_client_envelope=unsigned,
        payer_signature=signature_pb2.RecoverableEcdsaSignature(bytes=signature),
        target_originator=target_originator,
        message_retention_days=retention_days,
    )
