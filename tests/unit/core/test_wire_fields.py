"""Length-delimited fields come back byte for byte: the gateway signs each ClientEnvelope
exactly as the client sent it."""

from __future__ import annotations

import pytest

from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xnode.client.node import group_message_envelope
from xnode.core import wire


def test_envelopes_come_back_byte_for_byte_in_order() -> None:
    envelopes = [group_message_envelope(bytes(16), f"m{i}".encode()) for i in range(3)]
    request = payer_api.PublishClientEnvelopesRequest(envelopes=envelopes).SerializeToString()
    assert wire.length_delimited(request, 1) == [e.SerializeToString() for e in envelopes]


def test_unknown_fields_are_skipped_and_bytes_kept_as_sent() -> None:
    # Field 1 carries bytes that a re-serialization would reorder (field 2 before field 1).
    odd = wire.field(2, b"\x0a\x01x") + wire.field(1, b"")
    request = wire.field(1, odd) + b"\x18\x05" + wire.field(9, b"zz") + wire.field(1, b"")
    assert wire.length_delimited(request, 1) == [odd, b""]


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x05abc", b"\x0a", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x0f"],
)
def test_truncated_or_invalid_input_is_an_error(data: bytes) -> None:
    with pytest.raises(wire.FrameError):
        wire.length_delimited(data, 1)
