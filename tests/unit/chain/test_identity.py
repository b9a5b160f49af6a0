"""Identifier associations from identity updates (GetInboxIds)."""

from __future__ import annotations

import pytest

from xmtp.identity.associations import association_pb2 as pb
from xnode.core.identity import (
    AssociationChange,
    AssociationEvent,
    IdentifierKind,
    association_changes,
    normalize_identifier,
    resolve_inbox,
)

ALICE = "0x" + "a1" * 20
BOB = "0x" + "b0" * 20
INBOX = "ab" * 32


def _eth(address: str) -> pb.MemberIdentifier:
    return pb.MemberIdentifier(ethereum_address=address)


def test_actions_become_association_changes_in_order() -> None:
    update = pb.IdentityUpdate(
        inbox_id=INBOX.upper(),
        actions=[
            pb.IdentityAction(create_inbox=pb.CreateInbox(initial_identifier=ALICE.upper()[2:])),
            pb.IdentityAction(add=pb.AddAssociation(new_member_identifier=_eth(BOB))),
            pb.IdentityAction(
                add=pb.AddAssociation(
                    new_member_identifier=pb.MemberIdentifier(installation_public_key=b"k" * 32)
                )
            ),
            pb.IdentityAction(
                add=pb.AddAssociation(
                    new_member_identifier=pb.MemberIdentifier(passkey=pb.Passkey(key=b"\x01\x02"))
                )
            ),
            pb.IdentityAction(change_recovery_address=pb.ChangeRecoveryAddress()),
            pb.IdentityAction(revoke=pb.RevokeAssociation(member_to_revoke=_eth(ALICE))),
            pb.IdentityAction(add=pb.AddAssociation(new_member_identifier=_eth("0x1234"))),
        ],
    )
    assert association_changes(update) == [
        AssociationChange(ALICE, IdentifierKind.ETHEREUM, INBOX, True, 0),
        AssociationChange(BOB, IdentifierKind.ETHEREUM, INBOX, True, 1),
        AssociationChange("0102", IdentifierKind.PASSKEY, INBOX, True, 3),
        AssociationChange(ALICE, IdentifierKind.ETHEREUM, INBOX, False, 5),
    ]


@pytest.mark.parametrize(
    ("identifier", "kind", "expected"),
    [
        (ALICE.upper().replace("0X", "0x"), 1, (ALICE, IdentifierKind.ETHEREUM)),
        (ALICE[2:], 0, (ALICE, IdentifierKind.ETHEREUM)),
        ("0x1234", 1, None),
        ("0x" + "zz" * 20, 1, None),
        ("0xABCD", 2, ("abcd", IdentifierKind.PASSKEY)),
        ("", 2, None),
        (ALICE, 9, None),
    ],
)
def test_normalize_identifier(identifier: str, kind: int, expected: object) -> None:
    assert normalize_identifier(identifier, kind) == expected


def _event(seq: int, inbox: str, associated: bool, index: int = 0) -> AssociationEvent:
    return AssociationEvent(
        seq, AssociationChange(ALICE, IdentifierKind.ETHEREUM, inbox, associated, index)
    )


def test_resolve_inbox_latest_unrevoked_association_wins() -> None:
    assert resolve_inbox([]) is None
    assert resolve_inbox([_event(1, "a", True)]) == "a"
    assert resolve_inbox([_event(1, "a", True), _event(2, "b", True)]) == "b"
    # b revoked: a was never revoked, so it answers again.
    assert resolve_inbox([_event(1, "a", True), _event(2, "b", True), _event(3, "b", False)]) == "a"
    assert resolve_inbox([_event(1, "a", True), _event(2, "a", False)]) is None
    # Within one update, the later action counts.
    assert resolve_inbox([_event(4, "a", True, 0), _event(4, "a", False, 1)]) is None
