"""Leaf formats of the committed logs (docs/proofs.md, "Leaf format 2").

Format 1 hashed the signed content alone: `merkle.leaf_hash(unsigned)`. The content holds the
envelope's expiry (`expiry_unixtime`), but only someone holding the envelope can read it, so
a leaf whose envelope is gone said nothing about whether it may be gone: loss, withholding
and expiry looked the same.

Format 2 commits to the expiry beside the content, so a leaf can be opened without the
envelope: `merkle.leaf_hash(0x02 || expiry as 8 bytes big-endian || keccak256(unsigned))`.
A valid UnsignedOriginatorEnvelope never starts with 0x02 (field number 0 does not exist),
so no format 1 preimage is a format 2 one. Every leaf computed from an envelope is format 2;
leaves a node held without their envelope when it upgraded stay format 1 (migration 0008).

A leaf without its envelope is expired only when its committed expiry has passed; a format 1
leaf commits to none, so under format 1 nothing is provably expired."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core import merkle
from xnode.core.crypto import (
    SignatureError,
    keccak256,
    originator_digest,
    recover_public_key,
)
from xnode.core.retention import is_expired

FORMAT_V1 = 1
FORMAT_V2 = 2
_V2_TAG = b"\x02"


def leaf_v1(unsigned: bytes) -> bytes:
    return merkle.leaf_hash(unsigned)


def leaf_v2(unsigned: bytes, expiry: int) -> bytes:
    """`expiry`: the envelope's expiry_unixtime (0: never)."""
    return opened_leaf_v2(keccak256(unsigned), expiry)


def opened_leaf_v2(content_hash: bytes, expiry: int) -> bytes:
    """The format 2 leaf of an opening: the content's keccak256 and its expiry."""
    return merkle.leaf_hash(_V2_TAG + expiry.to_bytes(8, "big") + content_hash)


def signed_content(raw_originator_envelope: bytes) -> tuple[bytes, int]:
    """(the unsigned originator envelope's bytes, its expiry_unixtime); ValueError when the
    envelope does not decode."""
    try:
        envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw_originator_envelope)
        content = envelope.unsigned_originator_envelope
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(content)
    except DecodeError as exc:
        raise ValueError(f"originator envelope does not decode: {exc}") from None
    return content, unsigned.expiry_unixtime


def content_hash_of(raw_originator_envelope: bytes) -> bytes:
    """keccak256 of the envelope's signed content: with its expiry, the opening of its
    format 2 leaf, kept beside the leaf (raises ValueError when it does not decode)."""
    return keccak256(signed_content(raw_originator_envelope)[0])


def envelope_leaf(raw_originator_envelope: bytes, leaf_format: int = FORMAT_V2) -> bytes:
    """The leaf of a signed OriginatorEnvelope in `leaf_format` (raises ValueError when it
    does not decode)."""
    content, expiry = signed_content(raw_originator_envelope)
    return leaf_v1(content) if leaf_format == FORMAT_V1 else leaf_v2(content, expiry)


def leaf_matches(leaf: bytes, raw_originator_envelope: bytes) -> bool:
    """Whether the envelope is the one `leaf` commits to, in either format."""
    try:
        content, expiry = signed_content(raw_originator_envelope)
    except ValueError:
        return False
    return leaf in (leaf_v2(content, expiry), leaf_v1(content))


def _signer(raw_originator_envelope: bytes) -> bytes | None:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw_originator_envelope)
    try:
        return recover_public_key(
            envelope.originator_signature.bytes,
            originator_digest(envelope.unsigned_originator_envelope),
        )
    except SignatureError:
        return None


def provably_expired(committed_expiry: int | None, now_unix: int) -> bool:
    """Whether a leaf held without its envelope may be: only a format 2 leaf (its committed
    expiry known, None for format 1) whose expiry has passed."""
    return committed_expiry is not None and is_expired(committed_expiry, now_unix)


class Held(StrEnum):
    """What a node holds for one leaf of a log, judged at some time (the scrub, audits)."""

    MATCHES = "matches"  # the envelope the leaf commits to
    MISMATCH = "mismatch"  # stored bytes the leaf does not commit to: never to be served
    LOST = "lost"  # no envelope, and the leaf's committed expiry is ahead
    EXPIRED = "expired"  # no envelope, provably expired
    FORMAT_1 = "format_1"  # no envelope, a format 1 leaf: nothing provable either way


@dataclass(frozen=True, slots=True)
class HeldLeaf:
    """One leaf a node holds, with its envelope when it holds that too."""

    originator_node_id: int
    sequence_id: int
    leaf: bytes
    committed_expiry: int | None  # None: a format 1 leaf
    raw: bytes | None  # None: no envelope held
    # keccak256 of the signed content, kept beside a format 2 leaf (None: not known): with
    # committed_expiry, the leaf's opening, which an "expired" account carries
    content_hash: bytes | None = None

    def opening(self) -> tuple[bytes, int] | None:
        """(content hash, expiry) opening this format 2 leaf, from the envelope when held,
        else from the content hash kept beside the leaf; None when neither opens it."""
        if self.committed_expiry is None:
            return None
        content_hash = self.content_hash
        if self.raw is not None:
            try:
                content_hash = content_hash_of(self.raw)
            except ValueError:
                return None
        if content_hash is None:
            return None
        if opened_leaf_v2(content_hash, self.committed_expiry) != self.leaf:
            return None
        return content_hash, self.committed_expiry

    def judge(self, now_unix: int, originator_key: bytes | None = None) -> Held:
        """`originator_key`: when given, the envelope's originator signature must recover
        to it too (the leaf commits to the signed content, not to the signature's bytes)."""
        if self.raw is not None:
            if not leaf_matches(self.leaf, self.raw):
                return Held.MISMATCH
            if originator_key is not None and not self.signed_by(originator_key):
                return Held.MISMATCH
            return Held.MATCHES
        if self.committed_expiry is None:
            return Held.FORMAT_1
        if provably_expired(self.committed_expiry, now_unix):
            return Held.EXPIRED
        return Held.LOST

    def signed_by(self, key: bytes) -> bool:
        """Whether the envelope held (there must be one) is signed by `key`."""
        return self.raw is not None and _signer(self.raw) == key
