"""The one-pass reader of group messages (`mls._fast_group_message`) against the field-by-field
one (`mls.read_group_message`): on every input both give the same header, or the fast path
declines and the field-by-field reader refuses. So `parse_group_message` answers as before,
refusals included (the same MlsError text, which names the field).

Inputs: the official client's group messages and encoded ones (1, 2 and 4-byte vector lengths,
both wire formats, every sender and content type), every one-byte truncation and substitution
of them, random mutations (XNODE_MLS_DIFF_INPUTS, default 20,000; 200,000 in a bench run:
`XNODE_MLS_DIFF_INPUTS=200000 pytest tests/unit/core/test_mls_fast_path.py`), and hypothesis's
mutations of the parser fuzz (XNODE_FUZZ_EXAMPLES)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.unit.core.test_parser_fuzz import EXAMPLES, mutated
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core import mls
from xnode.core.mls import ContentType, FramingHeader, MlsError, SenderType, WireFormat

INPUTS = int(os.environ.get("XNODE_MLS_DIFF_INPUTS", "20000"))
OFFICIAL = Path(__file__).parents[2] / "fixtures" / "official_client" / "group_message.hex"
GROUP = bytes(range(16))


def _official() -> list[bytes]:
    clients = [
        envelopes_pb2.ClientEnvelope.FromString(bytes.fromhex(line))
        for line in OFFICIAL.read_text().split()
    ]
    return [c.group_message.v1.data for c in clients]


def _public(sender: SenderType, content: ContentType, aad: bytes, group: bytes) -> bytes:
    """A PublicMessage with this sender type (encode_framing only writes members)."""
    body = mls.encode_framing(WireFormat.PUBLIC_MESSAGE, group, 9, content, b"content", aad)
    head = 4 + len(mls.vector_bytes(group)) + 8
    index = b"\x00\x00\x00\x07" if sender in (SenderType.MEMBER, SenderType.EXTERNAL) else b""
    return body[:head] + bytes([sender]) + index + body[head + 5 :]


def _seeds() -> list[bytes]:
    seeds = _official()
    for size in (0, 5, 63, 64, 300, 16_383, 16_384, 20_000):  # 1, 2 and 4-byte lengths
        for content in ContentType:
            seeds.append(
                mls.encode_framing(
                    WireFormat.PRIVATE_MESSAGE, GROUP, 2**64 - 1, content, b"c" * size, b"a" * size
                )
            )
    for sender in SenderType:
        for content in ContentType:
            for aad in (b"", b"x" * 70):
                seeds.append(_public(sender, content, aad, b"g" * 64))
    return seeds


SEEDS = _seeds()
SMALL_SEEDS = tuple(s for s in SEEDS if len(s) < 600)


def _outcome(data: bytes) -> FramingHeader | str:
    try:
        return mls.read_group_message(data)
    except MlsError as exc:
        return f"MlsError: {exc}"


def _agree(data: bytes) -> None:
    expected = _outcome(data)
    fast = mls._fast_group_message(data)
    if fast is None:
        assert isinstance(expected, str), f"fast path declined a good message: {data.hex()}"
    else:
        assert fast == expected, data.hex()
    try:
        answer: FramingHeader | str = mls.parse_group_message(data)
    except MlsError as exc:
        answer = f"MlsError: {exc}"
    assert answer == expected, data.hex()


def test_the_fast_path_reads_every_seed() -> None:
    for data in SEEDS:
        header = mls._fast_group_message(data)
        assert header is not None and header == mls.read_group_message(data)


def test_official_messages_keep_their_framing() -> None:
    headers = [mls.parse_group_message(data) for data in _official()]
    assert {h.content_type for h in headers} >= {ContentType.APPLICATION, ContentType.COMMIT}


@pytest.mark.parametrize("seed", SMALL_SEEDS[:40], ids=lambda s: s[:24].hex())
def test_every_truncation_and_byte_change_agrees(seed: bytes) -> None:
    for end in range(len(seed) + 1):
        _agree(seed[:end])
        _agree(seed + b"\x00" * (end % 3 + 1))  # trailing bytes
    for i in range(len(seed)):
        for value in (0x00, 0x01, 0x03, 0x3F, 0x40, 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xFF):
            _agree(seed[:i] + bytes([value]) + seed[i + 1 :])


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        (b"\x00\x01\x00\x02\x40\x05" + b"g" * 5, "not minimally encoded"),  # 2-byte length 5
        (b"\x00\x01\x00\x02\xc0" + b"\x00" * 30, "reserved 8-byte form"),
        (b"\x00\x02\x00\x02\x01g", "protocol version 2"),
        (b"\x00\x01\x00\x05\x01g", "KEY_PACKAGE is not a framed message"),
        (
            mls.encode_framing(WireFormat.PRIVATE_MESSAGE, GROUP, 1, ContentType.COMMIT, b"x")[:-1],
            "PrivateMessage ciphertext: truncated",
        ),
    ],
)
def test_refusals_name_the_field_as_before(data: bytes, refusal: str) -> None:
    assert mls._fast_group_message(data) is None
    with pytest.raises(MlsError, match=refusal):
        mls.parse_group_message(data)


def _with_length(length: bytes, which: int, public: bool) -> bytes:
    """A message whose vector number `which` has `length` in place of its own length."""
    parts = [b"g" * 70, b"a" * 70, b"s" * 3, b"c" * 70]
    vectors = [
        length + part if i == which else mls.vector_bytes(part) for i, part in enumerate(parts)
    ]
    epoch = (5).to_bytes(8, "big")
    if public:  # group_id, epoch, sender (member 7), authenticated_data, content type, content
        head = b"\x00\x01\x00\x01" + vectors[0] + epoch + b"\x01\x00\x00\x00\x07"
        return head + vectors[1] + b"\x03" + b"content"
    return b"\x00\x01\x00\x02" + vectors[0] + epoch + b"\x01" + b"".join(vectors[1:])


@pytest.mark.parametrize("public", [False, True])
def test_lengths_not_minimally_encoded_are_refused_in_every_vector(public: bool) -> None:
    for which in range(2 if public else 4):
        size = 3 if which == 2 else 70
        good = _with_length(mls.varint_bytes(size), which, public)
        assert mls._fast_group_message(good) is not None
        longer = [(0x4000 | size).to_bytes(2, "big")] if size < 64 else []
        for length in [*longer, (0x8000_0000 | size).to_bytes(4, "big")]:
            data = _with_length(length, which, public)
            assert mls._fast_group_message(data) is None
            with pytest.raises(MlsError, match="not minimally encoded"):
                mls.parse_group_message(data)
            _agree(data)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(out))
        op = rng.randrange(5)
        if op == 0 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 1:
            del out[at:]
        elif op == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del out[at : at + rng.randint(1, 8)]
        elif out:  # a length byte that reads as a longer or shorter varint
            out[min(at, len(out) - 1)] = rng.choice((0x40, 0x80, 0xC0, 0x3F, 0x7F))
    return bytes(out)


def test_random_mutations_agree() -> None:
    rng = random.Random(12)
    for i in range(INPUTS):
        _agree(_mutate(rng, SMALL_SEEDS[i % len(SMALL_SEEDS)]))


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(mutated(SMALL_SEEDS))
def test_hypothesis_mutations_agree(data: bytes) -> None:
    _agree(data)
