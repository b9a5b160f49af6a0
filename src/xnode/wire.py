"""Protobuf wire encoding of repeated length-delimited fields.

Stored envelopes are already serialized; responses are built by framing those bytes rather
than parsing and re-serializing each one.
"""

from __future__ import annotations

from collections.abc import Iterable


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def repeated(number: int, payloads: Iterable[bytes]) -> bytes:
    return b"".join(field(number, p) for p in payloads)
