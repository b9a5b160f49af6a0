from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import wire


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_framed_repeated_field_parses_as_the_message(items: list[bytes]) -> None:
    parsed = api.GetNewestEnvelopeRequest.FromString(wire.repeated(1, items))
    assert list(parsed.topics) == items


@given(st.integers(0, 2**64 - 1))
def test_varint_matches_protobuf(value: int) -> None:
    message = api.QueryEnvelopesRequest(limit=value % 2**32)
    assert message.SerializeToString() == (
        wire.varint(2 << 3) + wire.varint(value % 2**32) if value % 2**32 else b""
    )
