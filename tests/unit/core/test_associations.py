"""The XIP-46 association state: every identity update the official client made applies, the
signature text and inbox id are libxmtp's, and updates that do not apply are refused naming
why (tampered copies, replays, signers without the right)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.identity_signers import (
    Installation,
    Passkey,
    Wallet,
    add,
    change_recovery,
    create,
    inbox_of,
    revoke,
    signed,
)
from xmtp.identity.associations import association_pb2 as a
from xmtp.identity.associations import signature_pb2 as s
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.associations import (
    AssociationError,
    AssociationState,
    WalletCheck,
    apply_update,
    ethereum,
    inbox_id_of,
    installation,
    passkey,
    signature_text,
    wallet_checks,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "official_client"


def official_updates() -> list[a.IdentityUpdate]:
    lines = (FIXTURES / "identity_update.hex").read_text().split()
    return [
        envelopes_pb2.ClientEnvelope.FromString(bytes.fromhex(x)).identity_update for x in lines
    ]


def replay(updates: list[a.IdentityUpdate]) -> dict[str, AssociationState]:
    states: dict[str, AssociationState] = {}
    for update in updates:
        states[update.inbox_id] = apply_update(states.get(update.inbox_id), update)
    return states


def refused(state: AssociationState | None, update: a.IdentityUpdate, why: str) -> None:
    with pytest.raises(AssociationError, match=why):
        apply_update(state, update)


def test_every_identity_update_of_the_official_client_applies() -> None:
    updates = official_updates()
    states = replay(updates)
    assert len(states) == 3
    for update in updates:
        state = states[update.inbox_id]
        for action in update.actions:
            if action.HasField("add"):
                key = action.add.new_member_identifier.installation_public_key
                assert state.has(installation(key))


def test_the_inbox_id_is_sha256_of_the_address_and_nonce() -> None:
    first = official_updates()[0]
    owner = first.actions[0].create_inbox.initial_identifier
    assert inbox_id_of(ethereum(owner), 0) == first.inbox_id
    # libxmtp's own test vector (unsigned_actions.rs)
    assert (
        inbox_id_of(ethereum("0x1234567890abcdef1234567890abcdef12345678"), 0)
        == "fcd18d86276d7a99fe522dba9660c420f03c8648785ada7c5daae232a3df77a9"
    )


def test_the_signature_text_is_libxmtps() -> None:
    """libxmtp's test vector (xmtp_id unsigned_actions.rs create_signatures), signatures aside."""
    owner = "0x1234567890abcdef1234567890abcdef12345678"
    other = "0x4567890abcdef1234567890abcdef12345678123"
    recovery = "0x7890abcdef1234567890abcdef12345678123456"
    app = a.MemberIdentifier(installation_public_key=bytes([1, 2, 3]))
    update = a.IdentityUpdate(
        inbox_id=inbox_id_of(ethereum(owner), 0),
        client_timestamp_ns=12,
        actions=[
            a.IdentityAction(create_inbox=a.CreateInbox(initial_identifier=owner)),
            a.IdentityAction(
                add=a.AddAssociation(
                    new_member_identifier=a.MemberIdentifier(ethereum_address=other)
                )
            ),
            a.IdentityAction(add=a.AddAssociation(new_member_identifier=app)),
            a.IdentityAction(
                revoke=a.RevokeAssociation(
                    member_to_revoke=a.MemberIdentifier(ethereum_address=other)
                )
            ),
            a.IdentityAction(revoke=a.RevokeAssociation(member_to_revoke=app)),
            a.IdentityAction(
                change_recovery_address=a.ChangeRecoveryAddress(new_recovery_identifier=recovery)
            ),
        ],
    )
    assert signature_text(update) == (
        "XMTP : Authenticate to inbox\n\n"
        "Inbox ID: fcd18d86276d7a99fe522dba9660c420f03c8648785ada7c5daae232a3df77a9\n"
        "Current time: 1970-01-01T00:00:00Z\n\n"
        f"- Create inbox\n  (Owner: {owner})\n"
        f"- Link address to inbox\n  (Address: {other})\n"
        "- Grant messaging access to app\n  (ID: 010203)\n"
        f"- Unlink address from inbox\n  (Address: {other})\n"
        "- Revoke messaging access from app\n  (ID: 010203)\n"
        f"- Change inbox recovery address\n  (Address: {recovery})\n\n"
        "For more info: https://xmtp.org/signatures"
    )


def test_a_flipped_signature_byte_is_refused() -> None:
    for update in official_updates()[:3]:
        for field in ("erc", "installation"):
            copy = a.IdentityUpdate()
            copy.CopyFrom(update)
            if field == "erc":
                sig = copy.actions[0].create_inbox.initial_identifier_signature.erc_191
                sig.bytes = sig.bytes[:10] + bytes([sig.bytes[10] ^ 1]) + sig.bytes[11:]
                why = "create inbox is signed by|does not recover"
            else:
                sig2 = copy.actions[1].add.new_member_signature.installation_key
                sig2.bytes = bytes([sig2.bytes[0] ^ 1]) + sig2.bytes[1:]
                why = "installation key signature is invalid"
            refused(None, copy, why)


def test_an_update_for_another_inbox_is_refused() -> None:
    updates = official_updates()
    states = replay(updates[:3])
    later = updates[3]
    copy = a.IdentityUpdate()
    copy.CopyFrom(later)
    other = next(i for i in states if i != later.inbox_id)
    copy.inbox_id = other
    # The signatures were made over the text naming the first inbox.
    refused(states[other], copy, "signature is invalid")
    wallet = Wallet()
    refused(None, signed(inbox_of(wallet, 1), [(create(wallet), [wallet])]), "names inbox")


def test_a_replayed_update_is_refused() -> None:
    updates = official_updates()
    states = replay(updates)
    refused(states[updates[3].inbox_id], updates[3], "replay")
    refused(states[updates[0].inbox_id], updates[0], "already created")


def test_a_member_added_twice_in_one_update_breaks_the_signatures() -> None:
    update = official_updates()[0]
    copy = a.IdentityUpdate()
    copy.CopyFrom(update)
    copy.actions.append(update.actions[1])
    refused(None, copy, "create inbox is signed by")


def test_revocation_removes_the_installation_and_its_signatures_no_longer_count() -> None:
    wallet, app, phone, friend = Wallet(), Installation(), Installation(), Wallet()
    inbox = inbox_of(wallet)
    state = apply_update(
        None, signed(inbox, [(create(wallet), [wallet]), (add(app), [wallet, app])])
    )
    state = apply_update(state, signed(inbox, [(add(phone), [wallet, phone])], ts=2_000_000_000))
    state = apply_update(state, signed(inbox, [(revoke(app), [wallet])], ts=2_000_000_001))
    assert not state.has(installation(app.public_key))
    assert state.has(installation(phone.public_key))
    # The revoked installation may not vouch for a new address any more.
    refused(
        state, signed(inbox, [(add(friend), [app, friend])], ts=2_000_000_002), "neither a member"
    )
    # ... while a current one may.
    state = apply_update(state, signed(inbox, [(add(friend), [phone, friend])], ts=2_000_000_003))
    assert state.has(ethereum(friend.address))


def test_revoking_an_address_revokes_the_installations_it_added() -> None:
    wallet, second, app = Wallet(), Wallet(), Installation()
    inbox = inbox_of(wallet)
    state = apply_update(
        None,
        signed(
            inbox,
            [
                (create(wallet), [wallet]),
                (add(second), [wallet, second]),
                (add(app), [second, app]),
            ],
        ),
    )
    assert state.has(installation(app.public_key))
    state = apply_update(state, signed(inbox, [(revoke(second), [wallet])], ts=2_000_000_000))
    assert not state.has(ethereum(second.address))
    assert not state.has(installation(app.public_key))


def test_only_the_recovery_identifier_revokes_and_changes_recovery() -> None:
    wallet, second, app, newer = Wallet(), Wallet(), Installation(), Wallet()
    inbox = inbox_of(wallet)
    state = apply_update(
        None, signed(inbox, [(create(wallet), [wallet]), (add(second), [wallet, second])])
    )
    refused(state, signed(inbox, [(revoke(app), [second])], ts=2_000_000_000), "not the recovery")
    refused(
        state,
        signed(inbox, [(change_recovery(second), [second])], ts=2_000_000_001),
        "not the recovery",
    )
    state = apply_update(
        state, signed(inbox, [(change_recovery(newer), [wallet])], ts=2_000_000_002)
    )
    assert state.recovery == ethereum(newer.address)
    # The new recovery address may add members without being one.
    state = apply_update(state, signed(inbox, [(add(app), [newer, app])], ts=2_000_000_003))
    assert state.has(installation(app.public_key))


def test_an_installation_cannot_add_an_installation_nor_sign_as_a_wallet() -> None:
    wallet, app, other = Wallet(), Installation(), Installation()
    inbox = inbox_of(wallet)
    state = apply_update(
        None, signed(inbox, [(create(wallet), [wallet]), (add(app), [wallet, app])])
    )
    refused(
        state, signed(inbox, [(add(other), [app, other])], ts=2_000_000_000), "cannot add another"
    )
    refused(None, signed(inbox, [(add(app), [wallet, app])]), "not been created")


def test_passkeys_are_verified_as_webauthn_p256() -> None:
    wallet, key = Wallet(), Passkey()
    inbox = inbox_of(wallet)
    state = apply_update(
        None, signed(inbox, [(create(wallet), [wallet]), (add(key), [wallet, key])])
    )
    assert state.has(passkey(key.public_key))
    forged = signed(inbox, [(create(wallet), [wallet]), (add(key), [wallet, Passkey()])])
    forged.actions[1].add.new_member_signature.passkey.public_key = key.public_key
    refused(None, forged, "passkey signature is invalid")


def test_smart_contract_wallets_are_asked_of_the_chain() -> None:
    account = "0x" + "ab" * 20
    update = a.IdentityUpdate(
        inbox_id=inbox_id_of(ethereum(account), 0),
        client_timestamp_ns=1,
        actions=[
            a.IdentityAction(
                create_inbox=a.CreateInbox(
                    initial_identifier=account,
                    initial_identifier_signature=s.Signature(
                        erc_6492=s.SmartContractWalletSignature(
                            account_id=f"eip155:31337:{account}", block_number=7, signature=b"sig"
                        )
                    ),
                )
            )
        ],
    )
    (check,) = wallet_checks(update)
    assert check == WalletCheck(31337, account, 7, check.digest, b"sig")
    refused(None, update, "does not accept")
    state = apply_update(None, update, {check: True})
    assert state.members[ethereum(account)].chain_id == 31337


def test_a_legacy_delegated_signature_is_refused() -> None:
    wallet = Wallet()
    update = signed(inbox_of(wallet), [(create(wallet), [wallet])])
    # Field 4 (delegated_erc_191) is not in this schema: it decodes as an unknown field.
    raw = update.actions[0].create_inbox.SerializeToString()
    action = a.CreateInbox.FromString(raw)
    action.ClearField("initial_identifier_signature")
    update.actions[0].create_inbox.CopyFrom(action)
    refused(None, update, "missing or of a kind")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_mangled_update_is_refused_as_an_association_error(data: st.DataObject) -> None:
    """Bytes flipped, cut or inserted anywhere in a real update: it applies or raises
    AssociationError, never anything else."""
    raw = bytearray(data.draw(st.sampled_from(official_updates())).SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    try:
        update = a.IdentityUpdate.FromString(bytes(raw))
    except DecodeError:
        return
    with contextlib.suppress(AssociationError):
        apply_update(None, update, {})


def test_the_official_clients_whole_identity_lifecycle_applies_in_chain_order() -> None:
    """identity_lifecycle.hex: create, add installation, link a wallet (vouched by an
    installation key), change recovery, revoke an installation, unlink the wallet."""
    lines = (FIXTURES / "identity_lifecycle.hex").read_text().split()
    updates = [
        envelopes_pb2.ClientEnvelope.FromString(bytes.fromhex(x)).identity_update for x in lines
    ]
    states = replay(updates)
    kinds = [a.WhichOneof("kind") for u in updates for a in u.actions]
    assert {"revoke", "change_recovery_address"} <= set(kinds)
    alice = next(s for s in states.values() if s.recovery not in s.members)
    # The linked wallet became the recovery address and was then unlinked; one app is left.
    assert [m.kind for m in alice.members] == ["ethereum", "installation"]


def test_an_ecdsa_signature_out_of_range_is_refused() -> None:
    wallet = Wallet()
    update = signed(inbox_of(wallet), [(create(wallet), [wallet])])
    sig = update.actions[0].create_inbox.initial_identifier_signature.erc_191
    sig.bytes = sig.bytes[:32] + b"\xff" * 32 + sig.bytes[64:]
    refused(None, update, "out of range")
    sig.bytes = b"\x00" * 32 + sig.bytes[32:]
    refused(None, update, "out of range")
