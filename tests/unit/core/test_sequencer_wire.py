"""The framing between a node's workers and the one that sequences (xnode.core.sequencer_wire)."""

from __future__ import annotations

import pytest

from xnode.core.crypto import SigningKey
from xnode.core.envelopes import originate
from xnode.core.fees import Fees
from xnode.core.sequencer_wire import (
    LENGTH,
    Payload,
    Status,
    WireError,
    decode_answer,
    decode_batch,
    encode_answer,
    encode_batch,
    encode_refusal,
)
from xnode.core.topics import Topic

KEY = SigningKey.generate()
NODE = 100


def payloads() -> list[Payload]:
    return [
        Payload(
            b"payer-envelope-%d" % i,
            Topic.parse(b"\x00" + bytes([i]) * 16),
            b"\xaa" * 20,
            i,
            bytes([i]) * 32,
        )
        for i in range(3)
    ] + [Payload(b"", Topic.parse(b"\x02" + b"i" * 32), b"", 0)]


def body(framed: bytes) -> bytes:
    (length,) = LENGTH.unpack_from(framed)
    assert len(framed) == LENGTH.size + length
    return framed[LENGTH.size :]


def test_a_batch_comes_back_as_sent() -> None:
    sent = payloads()
    request_id, batch = decode_batch(body(encode_batch(7, sent)))
    assert request_id == 7
    assert batch == sent
    assert [p.expiry(10**18) for p in batch] == [p.expiry(10**18) for p in sent]


def test_an_answer_rebuilds_the_signed_envelopes_from_what_was_sent() -> None:
    sent = payloads()
    signed = [
        originate(p, NODE, 41 + i, 10**18 + i, KEY, Fees(5 + i, i)) for i, p in enumerate(sent)
    ]
    answer = decode_answer(body(encode_answer(9, signed)), NODE, {9: sent})
    assert (answer.request_id, answer.status) == (9, Status.OK)
    assert [e.raw for e in answer.signed] == [e.raw for e in signed]
    assert answer.signed == signed  # every indexed column (the leaf is not compared)


@pytest.mark.parametrize("status", [Status.CLOSING, Status.ALREADY_PUBLISHED])
def test_a_refusal_carries_its_status_and_detail(status: Status) -> None:
    answer = decode_answer(body(encode_refusal(3, status, "drains")), NODE, {})
    assert (answer.request_id, answer.status, answer.detail, answer.signed) == (
        3,
        status,
        "drains",
        [],
    )


@pytest.mark.parametrize("cut", [1, 5, 13, 20])
def test_a_cut_batch_does_not_decode(cut: int) -> None:
    with pytest.raises(WireError):
        decode_batch(body(encode_batch(1, payloads()))[:-cut])


def test_trailing_bytes_and_unknown_requests_do_not_decode() -> None:
    with pytest.raises(WireError, match="past"):
        decode_batch(body(encode_batch(1, payloads())) + b"x")
    signed = [originate(p, NODE, 1, 1, KEY) for p in payloads()]
    with pytest.raises(WireError):
        decode_answer(body(encode_answer(2, signed)), NODE, {})
    with pytest.raises(WireError, match="envelopes for a batch"):
        decode_answer(body(encode_answer(2, signed)), NODE, {2: payloads()[:1]})
