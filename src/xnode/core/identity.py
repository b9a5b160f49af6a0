"""Identifier-to-inbox claims read from indexed identity updates (XIP-46 inbox log): which
inboxes an update says hold an identifier, for GetInboxIds (XIP-49 3.3.3).

These are claims, recorded for every indexed update whatever its signatures: GetInboxIds
answers only a claim the inbox's validated association state confirms
(xnode.core.associations, replayed by xnode.usecases.identity). Identifiers are normalized
here (an Ethereum address is 0x + 40 hex digits, compared case-insensitively; a passkey is
its public key, hex).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

from xmtp.identity.associations import association_pb2


class IdentifierKind(IntEnum):
    UNSPECIFIED = 0
    ETHEREUM = 1
    PASSKEY = 2


_ETHEREUM_ADDRESS = re.compile(r"0x[0-9a-f]{40}")


@dataclass(frozen=True, slots=True)
class AssociationChange:
    """One action's effect: `identifier` joins (associated) or leaves `inbox_id`."""

    identifier: str
    kind: IdentifierKind
    inbox_id: str
    associated: bool
    action_index: int


def normalize_identifier(identifier: str, kind: int) -> tuple[str, IdentifierKind] | None:
    """The stored form of an identifier, or None when it is malformed. UNSPECIFIED means
    Ethereum: older clients sent only an address."""
    try:
        parsed = IdentifierKind(kind)
    except ValueError:
        return None
    if parsed in (IdentifierKind.UNSPECIFIED, IdentifierKind.ETHEREUM):
        text = identifier.strip().lower()
        if not text.startswith("0x"):
            text = "0x" + text
        return (text, IdentifierKind.ETHEREUM) if _ETHEREUM_ADDRESS.fullmatch(text) else None
    text = identifier.strip().lower().removeprefix("0x")
    try:
        bytes.fromhex(text)
    except ValueError:
        return None
    return (text, parsed) if text else None


def _member(member: association_pb2.MemberIdentifier) -> tuple[str, IdentifierKind] | None:
    """Identifiers a client can look up; installation keys are members but not identifiers."""
    kind = member.WhichOneof("kind")
    if kind == "ethereum_address":
        return normalize_identifier(member.ethereum_address, IdentifierKind.ETHEREUM)
    if kind == "passkey":
        return normalize_identifier(member.passkey.key.hex(), IdentifierKind.PASSKEY)
    return None


def _action_effect(
    action: association_pb2.IdentityAction,
) -> tuple[tuple[str, IdentifierKind] | None, bool]:
    kind = action.WhichOneof("kind")
    if kind == "create_inbox":
        create = action.create_inbox
        return normalize_identifier(create.initial_identifier, create.initial_identifier_kind), True
    if kind == "add":
        return _member(action.add.new_member_identifier), True
    if kind == "revoke":
        return _member(action.revoke.member_to_revoke), False
    return None, False  # change_recovery_address moves no identifier in or out


def association_changes(update: association_pb2.IdentityUpdate) -> list[AssociationChange]:
    """What the update's actions do to identifier associations, in action order."""
    inbox_id = update.inbox_id.lower().removeprefix("0x")
    changes = []
    for index, action in enumerate(update.actions):
        identifier, associated = _action_effect(action)
        if identifier is not None:
            changes.append(AssociationChange(*identifier, inbox_id, associated, index))
    return changes


@dataclass(frozen=True, slots=True)
class AssociationEvent:
    """An association change at a point of the identity-update log (chain sequence id)."""

    sequence_id: int
    change: AssociationChange


def resolve_inbox(events: list[AssociationEvent]) -> str | None:
    """The inbox whose latest association of the identifier is not revoked afterwards.

    The store answers the same question in SQL; this is the reference for its tests."""
    last: dict[str, tuple[int, int, bool]] = {}
    for event in events:
        key = (event.sequence_id, event.change.action_index)
        current = last.get(event.change.inbox_id)
        if current is None or key > current[:2]:
            last[event.change.inbox_id] = (*key, event.change.associated)
    live = [(seq, idx, inbox) for inbox, (seq, idx, ok) in last.items() if ok]
    return max(live)[2] if live else None
