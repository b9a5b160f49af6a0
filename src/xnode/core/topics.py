"""Topics: one kind byte, then the identifier (XIP-49 3.3.2, docs/protocol.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

MAX_TOPIC_LENGTH = 128


class TopicKind(IntEnum):
    GROUP_MESSAGES = 0
    WELCOME_MESSAGES = 1
    IDENTITY_UPDATES = 2
    KEY_PACKAGES = 3


# The ClientEnvelope payload (oneof field name) each topic kind carries.
PAYLOAD_OF_KIND = {
    TopicKind.GROUP_MESSAGES: "group_message",
    TopicKind.WELCOME_MESSAGES: "welcome_message",
    TopicKind.IDENTITY_UPDATES: "identity_update",
    TopicKind.KEY_PACKAGES: "upload_key_package",
}
KIND_OF_PAYLOAD = {payload: kind for kind, payload in PAYLOAD_OF_KIND.items()}


class TopicError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Topic:
    kind: TopicKind
    identifier: bytes

    @property
    def raw(self) -> bytes:
        return bytes([self.kind]) + self.identifier

    @classmethod
    def parse(cls, raw: bytes) -> Topic:
        if not raw:
            raise TopicError("topic is empty")
        if len(raw) > MAX_TOPIC_LENGTH:
            raise TopicError(f"topic is {len(raw)} bytes, the limit is {MAX_TOPIC_LENGTH}")
        try:
            kind = TopicKind(raw[0])
        except ValueError:
            raise TopicError(f"unknown topic kind byte {raw[0]}") from None
        if len(raw) == 1:
            raise TopicError("topic has a kind byte but no identifier")
        return cls(kind, bytes(raw[1:]))

    def __str__(self) -> str:
        return f"{self.kind.name.lower()}/{self.identifier.hex()}"
