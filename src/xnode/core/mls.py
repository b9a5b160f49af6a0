"""Just enough of the MLS wire format (RFC 9420) to tell commits from other group messages.

The node never decrypts anything: a PublicMessage carries its content type in the clear inside
FramedContent, and a PrivateMessage carries it in its unencrypted header. Layouts read here:

    MLSMessage     = version u16 | wire_format u16 | body
    PublicMessage  = FramedContent: group_id<V> | epoch u64 | Sender
                     | authenticated_data<V> | content_type u8 | ...
    PrivateMessage = group_id<V> | epoch u64 | content_type u8 | authenticated_data<V>
                     | encrypted_sender_data<V> | ciphertext<V>
    Sender         = sender_type u8 | leaf_index u32 (member) or sender_index u32 (external)

A PrivateMessage is checked to its last byte; of a PublicMessage only the framing header
(what follows it, the content and its signature, needs the group's state to check).

<V> is a vector whose length is a variable-length integer (RFC 9420 section 2.1.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

MLS10 = 1


class WireFormat(IntEnum):
    PUBLIC_MESSAGE = 1
    PRIVATE_MESSAGE = 2
    WELCOME = 3
    GROUP_INFO = 4
    KEY_PACKAGE = 5


class ContentType(IntEnum):
    APPLICATION = 1
    PROPOSAL = 2
    COMMIT = 3


class SenderType(IntEnum):
    MEMBER = 1
    EXTERNAL = 2
    NEW_MEMBER_PROPOSAL = 3
    NEW_MEMBER_COMMIT = 4


# Sender types followed by a u32 index; the others carry nothing.
_INDEXED_SENDERS = {SenderType.MEMBER, SenderType.EXTERNAL}


class MlsError(ValueError):
    """Bytes that are not the MLS 1.0 structure expected; the message names the field."""


@dataclass(frozen=True, slots=True)
class FramingHeader:
    wire_format: WireFormat
    group_id: bytes
    epoch: int
    content_type: ContentType

    @property
    def is_commit(self) -> bool:
        return self.content_type is ContentType.COMMIT


class Reader:
    """Reads the TLS presentation language of RFC 9420 (big-endian, varint-prefixed vectors)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, n: int) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise MlsError(f"truncated at byte {self._pos}: need {n} more")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def varint(self) -> int:
        first = self.uint(1)
        prefix = first >> 6
        if prefix == 3:
            raise MlsError("variable-length integer uses the reserved 8-byte form")
        length = 1 << prefix
        value = first & 0x3F
        for byte in self.take(length - 1):
            value = (value << 8) | byte
        if length > 1 and value < (1 << (8 * (length // 2) - 2)):
            raise MlsError("variable-length integer is not minimally encoded")
        return value

    def vector(self) -> bytes:
        return self.take(self.varint())

    @property
    def position(self) -> int:
        return self._pos

    @property
    def length(self) -> int:
        return len(self._data)

    def done(self, what: str) -> None:
        extra = len(self._data) - self._pos
        if extra:
            raise MlsError(f"{what}: {extra} bytes after its end")


def _enum(kind: type[IntEnum], value: int, what: str) -> IntEnum:
    try:
        return kind(value)
    except ValueError:
        raise MlsError(f"unknown {what} {value}") from None


def _skip_sender(reader: Reader) -> None:
    sender = _enum(SenderType, reader.uint(1), "sender type")
    if sender in _INDEXED_SENDERS:
        reader.take(4)


def parse_framing(data: bytes) -> FramingHeader:
    """The framing header of a PublicMessage or PrivateMessage; raises MlsError otherwise."""
    reader = Reader(data)
    version = reader.uint(2)
    if version != MLS10:
        raise MlsError(f"protocol version {version} is not mls10 (1)")
    wire_format = WireFormat(_enum(WireFormat, reader.uint(2), "wire format"))
    if wire_format not in (WireFormat.PUBLIC_MESSAGE, WireFormat.PRIVATE_MESSAGE):
        raise MlsError(f"{wire_format.name} is not a framed message")
    group_id = reader.vector()
    epoch = reader.uint(8)
    if wire_format is WireFormat.PUBLIC_MESSAGE:
        _skip_sender(reader)
        reader.vector()  # authenticated_data
    content_type = ContentType(_enum(ContentType, reader.uint(1), "content type"))
    return FramingHeader(wire_format, group_id, epoch, content_type)


def parse_group_message(data: bytes) -> FramingHeader:
    """A group message as a node must see it: a PublicMessage's framing header, or a whole
    PrivateMessage (its header, then three vectors and nothing after them).

    Every group message published goes through here, so well-formed ones are read in one
    pass (`_fast_group_message`); anything else is read again by the field-by-field parser,
    whose refusal names the field."""
    header = _fast_group_message(data)
    if header is None:
        header = read_group_message(data)  # raises MlsError: the fast path missed nothing
    return header


def read_group_message(data: bytes) -> FramingHeader:
    """`parse_group_message` field by field with `Reader`: the reference the fast path is
    tested against (tests/unit/core/test_mls_fast_path.py), and what names a bad field."""
    header = parse_framing(data)
    if header.wire_format is WireFormat.PRIVATE_MESSAGE:
        reader = Reader(data)
        reader.take(4)
        reader.vector()  # group_id
        reader.take(9)  # epoch, content_type
        for what in ("authenticated_data", "encrypted_sender_data", "ciphertext"):
            try:
                reader.vector()
            except MlsError as exc:
                raise MlsError(f"PrivateMessage {what}: {exc}") from None
        reader.done("PrivateMessage")
    return header


_FRAMED = {1: WireFormat.PUBLIC_MESSAGE, 2: WireFormat.PRIVATE_MESSAGE}
_CONTENT_TYPES = {int(c): c for c in ContentType}
# Bytes after the sender type: a u32 index for members and external senders, else none.
_SENDER_INDEX_BYTES = {int(s): 4 if s in _INDEXED_SENDERS else 0 for s in SenderType}


def _vector_end(data: bytes, pos: int, size: int) -> int:
    """The end of the vector at `pos` (after its minimal varint length), or -1 when it is
    not one that ends within `size` bytes."""
    if pos >= size:
        return -1
    first = data[pos]
    prefix = first >> 6
    if prefix == 0:
        end = pos + 1 + first
    elif prefix == 1:
        if pos + 2 > size:
            return -1
        length = ((first & 0x3F) << 8) | data[pos + 1]
        if length < 1 << 6:
            return -1
        end = pos + 2 + length
    elif prefix == 2:
        if pos + 4 > size:
            return -1
        length = int.from_bytes(data[pos : pos + 4], "big") & 0x3FFF_FFFF
        if length < 1 << 14:
            return -1
        end = pos + 4 + length
    else:
        return -1
    return end if end <= size else -1


def _fast_group_message(data: bytes) -> FramingHeader | None:
    """`read_group_message`'s answer for a well-formed group message, read in one pass with
    indexes and slices (a third of the field-by-field parser's time); None for anything it
    does not recognise
    exactly, which the caller then reads field by field."""
    size = len(data)
    if size < 5 or data[0] != 0 or data[1] != MLS10 or data[2] != 0 or data[3] not in _FRAMED:
        return None
    wire_format = _FRAMED[data[3]]
    group_end = _vector_end(data, 4, size)
    if group_end < 0 or group_end + 8 > size:
        return None
    group_id = data[4 + (1 << (data[4] >> 6)) : group_end]  # after its 1, 2 or 4-byte length
    epoch = int.from_bytes(data[group_end : group_end + 8], "big")
    pos = group_end + 8
    if wire_format is WireFormat.PUBLIC_MESSAGE:
        if pos >= size or data[pos] not in _SENDER_INDEX_BYTES:
            return None
        pos = _vector_end(data, pos + 1 + _SENDER_INDEX_BYTES[data[pos]], size)  # aad
        if pos < 0:
            return None
    if pos >= size or data[pos] not in _CONTENT_TYPES:
        return None
    content_type = _CONTENT_TYPES[data[pos]]
    if wire_format is WireFormat.PRIVATE_MESSAGE:
        pos += 1
        for _ in range(3):  # authenticated_data, encrypted_sender_data, ciphertext
            pos = _vector_end(data, pos, size)
            if pos < 0:
                return None
        if pos != size:
            return None
    return FramingHeader(wire_format, group_id, epoch, content_type)


def is_commit(data: bytes) -> bool:
    """True for an MLS commit. Group messages are parsed before they get here (a payload
    that does not parse is refused), so False means another content type."""
    try:
        return parse_framing(data).is_commit
    except MlsError:
        return False


def is_mls_message(data: bytes) -> bool:
    try:
        parse_framing(data)
    except MlsError:
        return False
    return True


def varint_bytes(value: int) -> bytes:
    if value < 1 << 6:
        return value.to_bytes(1, "big")
    if value < 1 << 14:
        return (value | 0x4000).to_bytes(2, "big")
    if value < 1 << 30:
        return (value | 0x8000_0000).to_bytes(4, "big")
    raise ValueError("vector too long for MLS")


def encode_framing(
    wire_format: WireFormat,
    group_id: bytes,
    epoch: int,
    content_type: ContentType,
    body: bytes = b"",
    authenticated_data: bytes = b"",
) -> bytes:
    """A message with this framing header (tests and tools). A PrivateMessage is well formed
    with `body` as its ciphertext; a PublicMessage has `body` in place of its content."""
    out = MLS10.to_bytes(2, "big") + int(wire_format).to_bytes(2, "big")
    out += vector_bytes(group_id) + epoch.to_bytes(8, "big")
    if wire_format is WireFormat.PUBLIC_MESSAGE:
        out += bytes([SenderType.MEMBER]) + (0).to_bytes(4, "big")
        out += vector_bytes(authenticated_data)
        return out + bytes([content_type]) + body
    sender_data = b"\x00" * 16  # stands in for the encrypted sender data
    return (
        out
        + bytes([content_type])
        + vector_bytes(authenticated_data)
        + vector_bytes(sender_data)
        + vector_bytes(body)
    )


def vector_bytes(data: bytes) -> bytes:
    return varint_bytes(len(data)) + data


def mls_group_message(group_id: bytes, data: bytes) -> bytes:
    """`data` when it is already an MLS group message of this group (or empty); otherwise
    `data` as the ciphertext of an application PrivateMessage (epoch 0) of the group, which
    the node accepts: tools and benchmarks send plain bytes, the node only sees the framing."""
    if not data:
        return data  # nothing to frame: the node refuses it as having no data
    try:
        if parse_group_message(data).group_id == group_id:
            return data
    except MlsError:
        pass
    return encode_framing(WireFormat.PRIVATE_MESSAGE, group_id, 0, ContentType.APPLICATION, data)
