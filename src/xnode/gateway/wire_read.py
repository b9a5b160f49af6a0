"""Reads the length-delimited fields of a serialized message without parsing them, so the
gateway signs each ClientEnvelope exactly as the client serialized it (re-serializing a
parsed message may change its bytes, e.g. field order or unknown fields)."""

from __future__ import annotations


class WireError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def _skip(data: bytes, pos: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(data, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 5:
        return pos + 4
    if wire_type == 2:
        length, pos = _varint(data, pos)
        return pos + length
    raise WireError(f"unsupported wire type {wire_type}")


def length_delimited(data: bytes, number: int) -> list[bytes]:
    """Every occurrence of field `number` (wire type 2), in order; other fields are skipped."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire_type = key >> 3, key & 7
        if field == number and wire_type == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise WireError(f"field {number} runs past the end of the message")
            out.append(data[pos : pos + length])
            pos += length
        else:
            pos = _skip(data, pos, wire_type)
        if pos > len(data):
            raise WireError("a field runs past the end of the message")
    return out
