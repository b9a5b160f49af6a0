"""The checks a client makes on everything a node sends it (XIP-49 3.3.4), one exception per
failed check, so a tool or a test can tell which rule a node broke.

On publish: the returned envelope carries the payer envelope exactly as sent, is signed by
its originator and is timestamped within 30 minutes of the client's clock. On query and
subscribe: every envelope's signature recovers to the registry key of its originator (or, for
payloads indexed from the chain, to a registry node's key over the blockchain proof), its
authenticated data names the originator and the topic it came from and is covered by the
payer's signature, and sequence ids rise strictly per originator."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.constants import CHAIN_ORIGINATORS, NS_PER_SECOND
from xnode.core.crypto import (
    SignatureError,
    address_of,
    payer_digest,
    recover_public_key,
)
from xnode.core.cursors import Cursor
from xnode.core.envelopes import (
    ReceivedEnvelope,
    cursor_from_proto,
    envelope_signer,
    parse_originator_envelope,
)
from xnode.core.errors import Rejected
from xnode.core.mls import is_commit
from xnode.core.topics import KIND_OF_PAYLOAD, Topic, TopicError

MAX_CLOCK_SKEW_NS = 30 * 60 * NS_PER_SECOND  # 3.3.4: "within 30 mins of the client clock"


class EnvelopeCheckFailed(Exception):
    """A node sent something that breaks a rule of XIP-49 3.3.4 or 3.3.5."""

    rule = "3.3.4"
    # The serialized envelope that failed the check, when one did (the client sets it): what
    # a misbehavior report carries.
    envelope = b""

    def __init__(self, detail: str, originator: int = 0, sequence_id: int = 0) -> None:
        where = f"envelope {originator}:{sequence_id}: " if originator or sequence_id else ""
        super().__init__(f"{where}{detail} (XIP-49 {self.rule})")
        self.detail = detail
        self.originator = originator
        self.sequence_id = sequence_id


class MalformedEnvelope(EnvelopeCheckFailed):
    """The bytes do not decode as an OriginatorEnvelope."""


class UnknownOriginator(EnvelopeCheckFailed):
    """The originator id is not in the registry the client holds."""


class BadOriginatorSignature(EnvelopeCheckFailed):
    """The originator (or node) signature does not recover to a registry key."""


class PayerEnvelopeMismatch(EnvelopeCheckFailed):
    """A publish answer whose payer envelope is not the one the client sent."""


class TimestampSkew(EnvelopeCheckFailed):
    """originator_ns is more than 30 minutes from the client's clock."""


class OutOfOrder(EnvelopeCheckFailed):
    """A sequence id that does not rise strictly per originator (a duplicate or a step back),
    or a timestamp that goes back along one originator's log."""


class AadMismatch(EnvelopeCheckFailed):
    """The authenticated data names another originator or topic than the envelope's."""


class UnauthenticatedData(EnvelopeCheckFailed):
    """The client envelope (with its authenticated data) is not covered by a valid payer
    signature."""


class MissingDependency(EnvelopeCheckFailed):
    """An envelope whose depends_on cursor is not met by what the client has seen."""

    rule = "3.3.5"


@dataclass(frozen=True, slots=True)
class CheckedEnvelope:
    """An envelope that passed the checks; `raw` is the OriginatorEnvelope as received."""

    originator_node_id: int
    sequence_id: int
    originator_ns: int
    topic: bytes
    depends_on: Cursor
    is_commit: bool
    raw: bytes
    payer_envelope: bytes = field(repr=False, default=b"")
    client_envelope: bytes = field(repr=False, default=b"")


def _signer(env: ReceivedEnvelope) -> bytes:
    try:
        return envelope_signer(envelopes_pb2.OriginatorEnvelope.FromString(env.raw))
    except SignatureError as exc:
        raise BadOriginatorSignature(str(exc), env.originator_node_id, env.sequence_id) from None


def _check_signature(env: ReceivedEnvelope, keys: Mapping[int, bytes]) -> None:
    origin, seq = env.originator_node_id, env.sequence_id
    signer = _signer(env)
    if origin in CHAIN_ORIGINATORS:
        # Chain payloads are vouched for by the node that indexed them (node_signature).
        if signer not in keys.values():
            raise BadOriginatorSignature("the node signature is by no registry node", origin, seq)
        return
    key = keys.get(origin)
    if key is None:
        raise UnknownOriginator(f"originator {origin} is not in the registry", origin, seq)
    if signer != key:
        raise BadOriginatorSignature(
            f"signed by 0x{signer.hex()[:18]}..., not by originator {origin}'s registry key",
            origin,
            seq,
        )


def _client_envelope(env: ReceivedEnvelope) -> envelopes_pb2.ClientEnvelope:
    try:
        return envelopes_pb2.ClientEnvelope.FromString(env.payer_envelope.unsigned_client_envelope)
    except Exception as exc:  # protobuf's DecodeError, or worse on hostile bytes
        raise MalformedEnvelope(
            f"client envelope does not decode: {exc}", env.originator_node_id, env.sequence_id
        ) from None


def _check_payer_signature(env: ReceivedEnvelope, payers: Collection[bytes] | None) -> None:
    """The payer signs the serialized client envelope, aad included: that is what makes the
    aad authenticated (3.3.2). A recoverable signature recovers to some address whatever was
    signed, so it authenticates only against the payers the client trusts (`payers`, 20-byte
    addresses; None: any payer). Chain payloads may come without one (sent unwrapped)."""
    payer = env.payer_envelope
    origin, seq = env.originator_node_id, env.sequence_id
    if not payer.HasField("payer_signature"):
        if origin in CHAIN_ORIGINATORS:
            return
        raise UnauthenticatedData("the payer envelope has no payer signature", origin, seq)
    digest = payer_digest(payer.target_originator, payer.unsigned_client_envelope)
    try:
        address = address_of(recover_public_key(payer.payer_signature.bytes, digest))
    except SignatureError as exc:
        raise UnauthenticatedData(f"payer signature: {exc}", origin, seq) from None
    if payers is not None and address not in payers:
        raise UnauthenticatedData(
            f"signed by payer 0x{address.hex()}, not by a payer this client trusts", origin, seq
        )


def _topic_of(client: envelopes_pb2.ClientEnvelope, origin: int, seq: int) -> Topic:
    try:
        topic = Topic.parse(client.aad.target_topic)
    except TopicError as exc:
        raise AadMismatch(f"aad.target_topic: {exc}", origin, seq) from None
    payload = client.WhichOneof("payload")
    if payload is None or KIND_OF_PAYLOAD[payload] is not topic.kind:
        raise AadMismatch(
            f"aad.target_topic kind {topic.kind.name} does not match payload {payload}",
            origin,
            seq,
        )
    return topic


def _check_aad(
    env: ReceivedEnvelope, client: envelopes_pb2.ClientEnvelope, topics: Collection[bytes]
) -> Topic:
    origin, seq = env.originator_node_id, env.sequence_id
    target = env.payer_envelope.target_originator or client.aad.target_originator
    if origin not in CHAIN_ORIGINATORS and target != origin:
        raise AadMismatch(f"aad targets originator {target}, not {origin}", origin, seq)
    topic = _topic_of(client, origin, seq)
    if topics and topic.raw not in topics:
        raise AadMismatch(f"topic {topic.raw.hex()} was not asked for", origin, seq)
    return topic


def _is_commit(client: envelopes_pb2.ClientEnvelope) -> bool:
    return client.WhichOneof("payload") == "group_message" and is_commit(
        client.group_message.v1.data
    )


def check_received(
    raw: bytes,
    keys: Mapping[int, bytes] | None,
    topics: Collection[bytes] = (),
    payers: Collection[bytes] | None = None,
) -> CheckedEnvelope:
    """3.3.4 on query: signature, aad (originator, topic, payer signature). `keys` maps node
    ids to registry keys (None: no registry known, signatures are not checked); `topics` are
    those asked for (empty: any); `payers` the payer addresses trusted (None: any)."""
    try:
        env = parse_originator_envelope(raw)
    except Rejected as exc:
        raise MalformedEnvelope(exc.detail) from None
    if keys is not None:
        _check_signature(env, keys)
    client = _client_envelope(env)
    topic = _check_aad(env, client, topics)
    _check_payer_signature(env, payers)
    try:
        depends_on = cursor_from_proto(client.aad.depends_on, "aad.depends_on")
    except Rejected as exc:
        raise AadMismatch(exc.detail, env.originator_node_id, env.sequence_id) from None
    return CheckedEnvelope(
        env.originator_node_id,
        env.sequence_id,
        env.originator_ns,
        topic.raw,
        depends_on,
        _is_commit(client),
        raw,
        env.payer_envelope.SerializeToString(deterministic=True),
        env.payer_envelope.unsigned_client_envelope,
    )


def check_timestamp(env: CheckedEnvelope, now_ns: int, published: bool) -> None:
    """A publish answer must be stamped within 30 minutes of now either way; anything
    received may be old, but never that far in the future."""
    ahead = env.originator_ns - now_ns
    if ahead > MAX_CLOCK_SKEW_NS or (published and -ahead > MAX_CLOCK_SKEW_NS):
        raise TimestampSkew(
            f"originator_ns is {ahead / NS_PER_SECOND:+.0f} s from the client's clock",
            env.originator_node_id,
            env.sequence_id,
        )


def check_published(
    sent: envelopes_pb2.PayerEnvelope, env: CheckedEnvelope, target: int, now_ns: int
) -> None:
    """3.3.4 on publish, after check_received. Commits and identity updates come back as
    the chain's payloads (originators 0 and 1), which the target node indexed."""
    if env.originator_node_id != target and env.originator_node_id not in CHAIN_ORIGINATORS:
        raise AadMismatch(
            f"published to {target}, answered as originator {env.originator_node_id}",
            env.originator_node_id,
            env.sequence_id,
        )
    if env.payer_envelope != sent.SerializeToString(deterministic=True):
        raise PayerEnvelopeMismatch(
            "the payer envelope is not the one published", env.originator_node_id, env.sequence_id
        )
    check_timestamp(env, now_ns, published=True)


class OriginatorOrder:
    """Per originator, what was last accepted: the next must have a higher sequence id and a
    timestamp not before (3.3.4 query rule 1; 3.2.7's safety rule seen from the client).
    Starts from a cursor: a resumed subscription must not repeat what came before it."""

    def __init__(self, start: Cursor | None = None) -> None:
        self.cursor = start or Cursor()
        self._last_ns: dict[int, int] = {}

    def check(self, env: CheckedEnvelope) -> None:
        origin, seq = env.originator_node_id, env.sequence_id
        last = self.cursor.get(origin)
        if seq <= last:
            raise OutOfOrder(
                f"sequence id {seq} does not follow {last} (duplicate or step back)", origin, seq
            )
        if env.originator_ns < self._last_ns.get(origin, 0):
            raise OutOfOrder(
                f"timestamped before the previous envelope of originator {origin}", origin, seq
            )

    def accept(self, env: CheckedEnvelope) -> None:
        self.check(env)
        self.cursor = self.cursor.merge({env.originator_node_id: env.sequence_id})
        self._last_ns[env.originator_node_id] = env.originator_ns
