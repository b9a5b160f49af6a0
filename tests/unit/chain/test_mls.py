"""Commit detection from the MLS framing header (RFC 9420)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xnode.core.mls import (
    ContentType,
    MlsError,
    WireFormat,
    encode_framing,
    is_commit,
    is_mls_message,
    parse_framing,
)

GROUP = bytes(range(16))


@pytest.mark.parametrize("wire", [WireFormat.PUBLIC_MESSAGE, WireFormat.PRIVATE_MESSAGE])
@pytest.mark.parametrize("content", list(ContentType))
def test_content_type_of_public_and_private_messages(
    wire: WireFormat, content: ContentType
) -> None:
    data = encode_framing(wire, GROUP, 7, content, b"rest", authenticated_data=b"aad")
    header = parse_framing(data)
    assert (header.wire_format, header.group_id, header.epoch) == (wire, GROUP, 7)
    assert header.content_type is content
    assert is_commit(data) is (content is ContentType.COMMIT)


def test_a_hand_written_public_commit() -> None:
    data = bytes.fromhex(
        "0001"
        "0001"  # mls10, public message
        "04"
        "cafebabe"  # group_id<V>
        "0000000000000002"  # epoch
        "02"
        "00000003"  # sender: external, sender_index 3
        "00"  # authenticated_data: empty
        "03"  # content_type: commit
    )
    assert is_commit(data)


@pytest.mark.parametrize("sender", [3, 4])
def test_senders_without_an_index(sender: int) -> None:
    data = bytes.fromhex("0001000101aa0000000000000001") + bytes([sender]) + b"\x00\x03"
    assert is_commit(data)


def test_long_group_ids_use_two_and_four_byte_lengths() -> None:
    for size in (63, 64, 16383, 16384):
        data = encode_framing(WireFormat.PRIVATE_MESSAGE, b"g" * size, 1, ContentType.COMMIT)
        assert parse_framing(data).group_id == b"g" * size


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", "truncated"),
        (bytes.fromhex("00020001"), "protocol version 2"),
        (bytes.fromhex("00010003"), "WELCOME is not a framed message"),
        (bytes.fromhex("00010009"), "unknown wire format"),
        (bytes.fromhex("000100021000"), "truncated"),
        (bytes.fromhex("00010002400100"), "not minimally encoded"),
        (bytes.fromhex("00010002c0"), "reserved 8-byte form"),
        (bytes.fromhex("0001000200000000000000000107"), "unknown content type"),
        (bytes.fromhex("0001000100000000000000000109"), "unknown sender type"),
    ],
)
def test_malformed_framing(data: bytes, error: str) -> None:
    with pytest.raises(MlsError, match=error):
        parse_framing(data)
    assert not is_commit(data)
    assert not is_mls_message(data)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    assert is_commit(data) in (True, False)


@given(
    st.sampled_from([WireFormat.PUBLIC_MESSAGE, WireFormat.PRIVATE_MESSAGE]),
    st.binary(max_size=300),
    st.integers(0, 2**64 - 1),
    st.sampled_from(list(ContentType)),
    st.binary(max_size=100),
)
def test_round_trip(
    wire: WireFormat, group: bytes, epoch: int, content: ContentType, aad: bytes
) -> None:
    header = parse_framing(encode_framing(wire, group, epoch, content, b"x", aad))
    assert (header.wire_format, header.group_id, header.epoch, header.content_type) == (
        wire,
        group,
        epoch,
        content,
    )
