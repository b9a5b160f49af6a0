"""How a node's workers hand validated batches to the worker that sequences them, and get
the signed envelopes back (xnode.runtime.forwarding). Pure byte framing, no I/O.

Every frame is a 4-byte big-endian length, then the body. A batch (worker -> sequencer):
request id (8 bytes), count (4), then per envelope the lengths of the payer envelope (4),
topic (2), payer address (1) and payer digest (1), the retention days (4), then those
bytes. An answer: request id (8), a status byte; OK: count (4), then per envelope sequence
id, originator ns, expiry, base fee, congestion fee (8 bytes each) and the signed envelope's
length (4) and bytes; otherwise a UTF-8 detail. Both ends are processes of one node, on one machine.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from xnode.core.envelopes import IndexedEnvelope, Originable
from xnode.core.retention import expiry_unixtime
from xnode.core.topics import Topic

LENGTH = struct.Struct(">I")
_BATCH = struct.Struct(">QI")
_PAYLOAD = struct.Struct(">IHBBI")
_ANSWER = struct.Struct(">QB")
_COUNT = struct.Struct(">I")
_SIGNED = struct.Struct(">QQQQQI")


class Status(IntEnum):
    OK = 0
    CLOSING = 1  # the sequencer drains: nothing of the batch was stored, sequence it yourself
    FAILED = 2  # the append failed; whether it was stored is unknown
    ALREADY_PUBLISHED = 3  # a payer envelope of the batch is stored already: nothing stored


class WireError(ValueError):
    """A frame that does not decode (a bug, or a peer of another version)."""


@dataclass(frozen=True, slots=True)
class Payload:
    """What the sequencer needs of a validated payer envelope (xnode.core.envelopes.Originable)."""

    raw: bytes
    topic: Topic
    payer_address: bytes
    retention_days: int
    payer_digest: bytes = b""

    def expiry(self, originator_ns: int) -> int:
        return expiry_unixtime(self.topic.kind, self.retention_days, originator_ns)


@dataclass(frozen=True, slots=True)
class Answer:
    request_id: int
    status: Status
    signed: list[IndexedEnvelope]
    detail: str = ""


def frame(body: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body


def encode_batch(request_id: int, batch: Sequence[Originable]) -> bytes:
    parts = [_BATCH.pack(request_id, len(batch))]
    for p in batch:
        topic = p.topic.raw
        digest = p.payer_digest
        parts.append(
            _PAYLOAD.pack(
                len(p.raw), len(topic), len(p.payer_address), len(digest), p.retention_days
            )
        )
        parts += (p.raw, topic, p.payer_address, digest)
    return frame(b"".join(parts))


def decode_batch(body: bytes) -> tuple[int, list[Payload]]:
    try:
        request_id, count = _BATCH.unpack_from(body)
        at = _BATCH.size
        batch = []
        for _ in range(count):
            raw_len, topic_len, address_len, digest_len, days = _PAYLOAD.unpack_from(body, at)
            at += _PAYLOAD.size
            raw = body[at : at + raw_len]
            at += raw_len
            topic = Topic.parse(body[at : at + topic_len])
            at += topic_len
            address = body[at : at + address_len]
            at += address_len
            batch.append(Payload(raw, topic, address, days, body[at : at + digest_len]))
            at += digest_len
    except (struct.error, ValueError) as exc:
        raise WireError(f"batch does not decode: {exc}") from None
    if at != len(body):
        raise WireError(f"batch has {len(body) - at} bytes past its {count} envelopes")
    return request_id, batch


def encode_answer(request_id: int, signed: Sequence[IndexedEnvelope]) -> bytes:
    parts = [_ANSWER.pack(request_id, Status.OK), _COUNT.pack(len(signed))]
    for e in signed:
        parts.append(
            _SIGNED.pack(
                e.sequence_id,
                e.originator_ns,
                e.expiry,
                e.base_fee,
                e.congestion_fee,
                len(e.raw),
            )
        )
        parts.append(e.raw)
    return frame(b"".join(parts))


def encode_refusal(request_id: int, status: Status, detail: str) -> bytes:
    return frame(_ANSWER.pack(request_id, status) + detail.encode())


def decode_answer(body: bytes, node_id: int, batches: dict[int, Sequence[Originable]]) -> Answer:
    """`batches`: what was sent, by request id (the answer carries only what signing added)."""
    try:
        request_id, status = _ANSWER.unpack_from(body)
        at = _ANSWER.size
        if status != Status.OK:
            return Answer(request_id, Status(status), [], body[at:].decode(errors="replace"))
        (count,) = _COUNT.unpack_from(body, at)
        at += _COUNT.size
        sent = batches[request_id]
        if count != len(sent):
            raise WireError(f"answer has {count} envelopes for a batch of {len(sent)}")
        signed = []
        for payer in sent:
            seq, ns, expiry, base, congestion, raw_len = _SIGNED.unpack_from(body, at)
            at += _SIGNED.size
            raw = body[at : at + raw_len]
            at += raw_len
            signed.append(
                IndexedEnvelope(
                    node_id,
                    seq,
                    ns,
                    payer.topic.raw,
                    expiry,
                    payer.payer_address,
                    raw,
                    base_fee=base,
                    congestion_fee=congestion,
                )
            )
    except (struct.error, ValueError, KeyError) as exc:
        raise WireError(f"answer does not decode: {exc}") from None
    return Answer(request_id, Status.OK, signed)
