"""Protobuf wire framing of already-serialized messages, both ways.

Stored envelopes are already serialized: responses are built by framing those bytes rather
than parsing and re-serializing each one, and SubscribeOriginatorsResponse frames are read
without re-serializing the envelopes inside, so each envelope is stored byte for byte as its
originator signed and served it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


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


class FrameError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise FrameError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FrameError("varint too long")


def fields(data: bytes) -> Iterator[tuple[int, bytes | None]]:
    """(field number, payload) for length-delimited fields; other wire types yield None."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise FrameError("truncated length-delimited field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire_type == 0:
            _, pos = _varint(data, pos)
            yield number, None
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
            yield number, None
        else:
            raise FrameError(f"unsupported wire type {wire_type}")
    if pos != len(data):
        raise FrameError("truncated fixed-width field")


def originator_envelopes(response: bytes) -> list[bytes]:
    """The envelopes of one SubscribeOriginatorsResponse (envelopes = 1 { envelopes = 1 })."""
    found: list[bytes] = []
    for number, payload in fields(response):
        if number == 1 and payload is not None:
            found += [raw for n, raw in fields(payload) if n == 1 and raw is not None]
    return found


def length_delimited(data: bytes, number: int) -> list[bytes]:
    """Every occurrence of field `number` (wire type 2), in order and byte for byte as sent
    (re-serializing a parsed message may change its bytes); other fields are skipped."""
    return [payload for n, payload in fields(data) if n == number and payload is not None]
