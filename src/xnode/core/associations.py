"""The association state of an inbox (XIP-46), replayed from its identity updates in chain
order, with every action's signatures checked as libxmtp's `xmtp_id` crate checks them.

An update applies to a state or raises AssociationError naming why. Signatures are made over
the update's human-readable signature text (`signature_text`): recoverable ECDSA with the
EIP-191 personal_sign prefix (wallets), Ed25519ph with the context "IDENTITY UPDATE
SIGNATURE" (installation keys), P-256 WebAuthn (passkeys). Smart contract wallet signatures
(ERC-1271) need the chain: `wallet_checks` lists what to ask, the caller asks its chain port
and passes the answers in. The legacy delegated signature (V2 keys, Signature field 4) is not
in this schema and is refused.

Identifiers keep the form the update gives them, as libxmtp compares them: an Ethereum
address a wallet signature recovers is lowercase, so a mixed-case address in an action does
not match its signer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from Crypto.Hash import SHA512
from Crypto.Signature import eddsa
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from xmtp.identity.associations import association_pb2, signature_pb2
from xnode.core.crypto import SECP256K1_ORDER, SignatureError, address_of, keccak256
from xnode.core.crypto import recover_public_key as _recover

HEADER = "XMTP : Authenticate to inbox"
FOOTER = "For more info: https://xmtp.org/signatures"
INSTALLATION_KEY_CONTEXT = b"IDENTITY UPDATE SIGNATURE"

_ETHEREUM = re.compile(r"0x[0-9a-fA-F]{40}")
_CAIP2 = re.compile(r"[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}")
_CAIP10_ACCOUNT = re.compile(r"[-.%a-zA-Z0-9]{1,128}")
_DECIMAL = re.compile(r"[0-9]{1,20}")


class AssociationError(ValueError):
    """An identity update that does not apply to the inbox's current state."""


class MemberKind(StrEnum):
    ETHEREUM = "ethereum"
    INSTALLATION = "installation"
    PASSKEY = "passkey"


class SignatureKind(StrEnum):
    ERC191 = "erc-191"
    ERC1271 = "erc-1271"
    INSTALLATION_KEY = "installation-key"
    P256 = "p256"


# Which signature a member of each kind signs with (libxmtp allowed_signature_for_kind).
_SIGNS_WITH = {
    MemberKind.ETHEREUM: (SignatureKind.ERC191, SignatureKind.ERC1271),
    MemberKind.INSTALLATION: (SignatureKind.INSTALLATION_KEY,),
    MemberKind.PASSKEY: (SignatureKind.P256,),
}


@dataclass(frozen=True, slots=True)
class MemberId:
    """An Ethereum address (as written), or an installation or passkey public key (hex)."""

    kind: MemberKind
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Member:
    identifier: MemberId
    added_by: MemberId | None
    chain_id: int | None  # a smart contract wallet's chain; it must sign from it again


@dataclass(frozen=True, slots=True)
class AssociationState:
    inbox_id: str
    members: Mapping[MemberId, Member]
    recovery: MemberId
    seen_signatures: frozenset[bytes] = field(default=frozenset())

    def has(self, identifier: MemberId) -> bool:
        return identifier in self.members


@dataclass(frozen=True, slots=True)
class WalletCheck:
    """An ERC-1271 question for the chain: does `account` accept `signature` over `digest`
    (the EIP-191 hash of the signature text) at `block_number` on chain `chain_id`?"""

    chain_id: int
    account: str  # 0x + 40 lowercase hex
    block_number: int
    digest: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class _Verified:
    signer: MemberId
    kind: SignatureKind
    raw: bytes  # what the replay check remembers
    chain_id: int | None = None


# --- identifiers and text ----------------------------------------------------------------


def ethereum(address: str) -> MemberId:
    return MemberId(MemberKind.ETHEREUM, address)


def installation(public_key: bytes) -> MemberId:
    return MemberId(MemberKind.INSTALLATION, public_key.hex())


def passkey(public_key: bytes) -> MemberId:
    return MemberId(MemberKind.PASSKEY, public_key.hex())


def identifier_of(text: str, kind: int) -> MemberId:
    """CreateInbox and ChangeRecoveryAddress name an identifier by text and kind;
    UNSPECIFIED is Ethereum (older clients)."""
    if kind in (
        association_pb2.IDENTIFIER_KIND_UNSPECIFIED,
        association_pb2.IDENTIFIER_KIND_ETHEREUM,
    ):
        return ethereum(text)
    if kind == association_pb2.IDENTIFIER_KIND_PASSKEY:
        try:
            return passkey(bytes.fromhex(text))
        except ValueError:
            raise AssociationError(f"passkey identifier {text!r} is not hex") from None
    raise AssociationError(f"unknown identifier kind {kind}")


def member_of(message: association_pb2.MemberIdentifier, where: str) -> MemberId:
    kind = message.WhichOneof("kind")
    if kind == "ethereum_address":
        return ethereum(message.ethereum_address)
    if kind == "installation_public_key":
        return installation(message.installation_public_key)
    if kind == "passkey":
        return passkey(message.passkey.key)
    raise AssociationError(f"{where} is missing")


def inbox_id_of(identifier: MemberId, nonce: int) -> str:
    """sha256 of the identifier's text and the decimal nonce, hex (libxmtp Identifier::inbox_id)."""
    if identifier.kind is MemberKind.ETHEREUM and not _ETHEREUM.fullmatch(identifier.text):
        raise AssociationError(f"account address {identifier.text!r} is not 0x and 40 hex digits")
    return hashlib.sha256(f"{identifier}{nonce}".encode()).hexdigest()


def _timestamp(ns: int) -> str:
    signed = ns - (1 << 64) if ns >= 1 << 63 else ns  # chrono reads the u64 as an i64
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=signed // 1_000_000_000)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


_LABEL = {
    MemberKind.ETHEREUM: "Address",
    MemberKind.INSTALLATION: "ID",
    MemberKind.PASSKEY: "Passkey",
}
_ADD = {
    MemberKind.INSTALLATION: "Grant messaging access to app",
    MemberKind.ETHEREUM: "Link address to inbox",
    MemberKind.PASSKEY: "Link passkey to inbox",
}
_REVOKE = {
    MemberKind.INSTALLATION: "Revoke messaging access from app",
    MemberKind.ETHEREUM: "Unlink address from inbox",
    MemberKind.PASSKEY: "Unlink passkey from inbox",
}


def _action_text(action: association_pb2.IdentityAction, index: int) -> str:
    kind = action.WhichOneof("kind")
    where = f"actions[{index}]"
    if kind == "create_inbox":
        create = action.create_inbox
        owner = identifier_of(create.initial_identifier, create.initial_identifier_kind)
        return f"- Create inbox\n  (Owner: {owner})"
    if kind == "add":
        new = member_of(action.add.new_member_identifier, f"{where}.add.new_member_identifier")
        return f"- {_ADD[new.kind]}\n  ({_LABEL[new.kind]}: {new})"
    if kind == "revoke":
        gone = member_of(action.revoke.member_to_revoke, f"{where}.revoke.member_to_revoke")
        return f"- {_REVOKE[gone.kind]}\n  ({_LABEL[gone.kind]}: {gone})"
    if kind == "change_recovery_address":
        change = action.change_recovery_address
        new = identifier_of(change.new_recovery_identifier, change.new_recovery_identifier_kind)
        return f"- Change inbox recovery address\n  (Address: {new})"
    raise AssociationError(f"{where} has no action")


def signature_text(update: association_pb2.IdentityUpdate) -> str:
    """The text every signature of the update signs, exactly as libxmtp builds it."""
    actions = "\n".join(_action_text(a, i) for i, a in enumerate(update.actions))
    return (
        f"{HEADER}\n\nInbox ID: {update.inbox_id}\nCurrent time: "
        f"{_timestamp(update.client_timestamp_ns)}\n\n{actions}\n\n{FOOTER}"
    )


def personal_sign_digest(text: str) -> bytes:
    """EIP-191 version 0x45: what a wallet's personal_sign signs."""
    message = text.encode()
    return keccak256(b"\x19Ethereum Signed Message:\n", str(len(message)).encode(), message)


# --- signatures --------------------------------------------------------------------------


def _recoverable_ecdsa(raw: bytes, digest: bytes) -> _Verified:
    """libxmtp normalizes S to the low half keeping the recovery byte, then recovers."""
    if len(raw) != 65:
        raise AssociationError(f"ECDSA signature is {len(raw)} bytes, not 65")
    r, s = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:64], "big")
    if not (0 < r < SECP256K1_ORDER and 0 < s < SECP256K1_ORDER):
        raise AssociationError("ECDSA signature r or s is out of range")
    if s > SECP256K1_ORDER // 2:
        s = SECP256K1_ORDER - s
    normalized = raw[:32] + s.to_bytes(32, "big") + raw[64:]
    v = raw[64]
    if v in (0, 1, 27, 28):
        parity = v % 27
    elif v >= 35:
        parity = (v - 35) % 2
    else:
        raise AssociationError(f"ECDSA recovery byte {v} is not 0, 1, 27, 28 or >= 35")
    try:
        public_key = _recover(normalized[:64] + bytes([parity]), digest)
    except SignatureError as exc:
        raise AssociationError(f"ECDSA signature does not recover: {exc}") from None
    return _Verified(
        ethereum("0x" + address_of(public_key).hex()), SignatureKind.ERC191, normalized
    )


def _installation_key(sig: signature_pb2.RecoverableEd25519Signature, text: str) -> _Verified:
    if len(sig.public_key) != 32 or len(sig.bytes) != 64:
        raise AssociationError("installation key signature needs a 32-byte key, 64-byte signature")
    try:
        key = eddsa.import_public_key(encoded=sig.public_key)
        verifier = eddsa.new(key, "rfc8032", context=INSTALLATION_KEY_CONTEXT)
        verifier.verify(SHA512.new(text.encode()), sig.bytes)
    except ValueError as exc:
        raise AssociationError(f"installation key signature is invalid ({exc})") from None
    return _Verified(installation(sig.public_key), SignatureKind.INSTALLATION_KEY, sig.bytes)


def _passkey(sig: signature_pb2.RecoverablePasskeySignature, text: str) -> _Verified:
    """WebAuthn: the client data's challenge is the signature text (base64url, unpadded); the
    P-256 signature covers authenticator data || sha256(client data JSON)."""
    try:
        client_data = json.loads(sig.client_data_json)
        challenge, origin = client_data["challenge"], client_data["origin"]
    except (ValueError, KeyError, TypeError):
        raise AssociationError("passkey client_data_json is invalid") from None
    expected = base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()
    if not isinstance(origin, str) or challenge != expected:
        raise AssociationError("passkey challenge is not the signature text")
    try:
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sig.public_key)
        r, s = decode_dss_signature(sig.signature)
        signed = sig.authenticator_data + hashlib.sha256(sig.client_data_json).digest()
        key.verify(sig.signature, signed, ec.ECDSA(hashes.SHA256()))
    except (ValueError, InvalidSignature):
        raise AssociationError("passkey signature is invalid") from None
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return _Verified(passkey(sig.public_key), SignatureKind.P256, raw)


def _wallet_check(sig: signature_pb2.SmartContractWalletSignature, digest: bytes) -> WalletCheck:
    parts = sig.account_id.split(":")
    if len(parts) != 3:
        raise AssociationError(f"account_id {sig.account_id!r} is not CAIP-10")
    chain, account = f"{parts[0]}:{parts[1]}", parts[2]
    if not _CAIP2.fullmatch(chain) or not _CAIP10_ACCOUNT.fullmatch(account):
        raise AssociationError(f"account_id {sig.account_id!r} is not CAIP-10")
    if parts[0] != "eip155" or not _DECIMAL.fullmatch(parts[1]) or int(parts[1]) >= 1 << 64:
        raise AssociationError(f"account_id {sig.account_id!r} is not an eip155 chain")
    if not _ETHEREUM.fullmatch(account):
        raise AssociationError(f"account_id {sig.account_id!r} names no Ethereum address")
    return WalletCheck(int(parts[1]), account.lower(), sig.block_number, digest, sig.signature)


def wallet_checks(update: association_pb2.IdentityUpdate) -> list[WalletCheck]:
    """The ERC-1271 questions the update's smart contract wallet signatures raise."""
    found = [s for a in update.actions for s in _signatures(a)]
    if not any(s.WhichOneof("signature") == "erc_6492" for s in found):
        return []
    digest = personal_sign_digest(signature_text(update))
    return [
        _wallet_check(s.erc_6492, digest) for s in found if s.WhichOneof("signature") == "erc_6492"
    ]


def _verify(
    sig: signature_pb2.Signature, text: str, digest: bytes, wallets: Mapping[WalletCheck, bool]
) -> _Verified:
    kind = sig.WhichOneof("signature")
    if kind == "erc_191":
        return _recoverable_ecdsa(sig.erc_191.bytes, digest)
    if kind == "installation_key":
        return _installation_key(sig.installation_key, text)
    if kind == "passkey":
        return _passkey(sig.passkey, text)
    if kind == "erc_6492":
        check = _wallet_check(sig.erc_6492, digest)
        if not wallets.get(check, False):
            raise AssociationError(
                f"smart contract wallet {check.account} on chain {check.chain_id} does not "
                f"accept the signature at block {check.block_number} (ERC-1271)"
            )
        return _Verified(
            ethereum(check.account), SignatureKind.ERC1271, check.signature, check.chain_id
        )
    raise AssociationError("signature is missing or of a kind this node does not verify")


def _signatures(action: association_pb2.IdentityAction) -> list[signature_pb2.Signature]:
    kind = action.WhichOneof("kind")
    if kind == "create_inbox":
        return [action.create_inbox.initial_identifier_signature]
    if kind == "add":
        return [action.add.existing_member_signature, action.add.new_member_signature]
    if kind == "revoke":
        return [action.revoke.recovery_identifier_signature]
    if kind == "change_recovery_address":
        return [action.change_recovery_address.existing_recovery_identifier_signature]
    return []


# --- the state machine -------------------------------------------------------------------


def _allowed(role: MemberKind, signature: _Verified, what: str) -> None:
    if signature.kind not in _SIGNS_WITH[role]:
        raise AssociationError(f"{what}: a {role} member cannot sign with {signature.kind}")


def _same_chain(state: AssociationState, signature: _Verified) -> None:
    member = state.members.get(signature.signer)
    if member is not None and member.chain_id != signature.chain_id:
        raise AssociationError(
            f"{signature.signer} was added on chain {member.chain_id or 0} but signs from "
            f"chain {signature.chain_id or 0}"
        )


def _not_replayed(state: AssociationState, signatures: list[_Verified]) -> None:
    for signature in signatures:
        if signature.raw in state.seen_signatures:
            raise AssociationError(f"a signature of {signature.signer} was used before (replay)")


def _create(
    state: AssociationState | None, action: association_pb2.CreateInbox, signature: _Verified
) -> AssociationState:
    if state is not None:
        raise AssociationError("the inbox was already created")
    owner = identifier_of(action.initial_identifier, action.initial_identifier_kind)
    if signature.signer != owner:
        raise AssociationError(f"create inbox is signed by {signature.signer}, not {owner}")
    _allowed(owner.kind, signature, "create inbox")
    inbox_id = inbox_id_of(owner, action.nonce)
    return AssociationState(inbox_id, {owner: Member(owner, None, signature.chain_id)}, owner)


def _add(
    state: AssociationState, new_id: MemberId, existing: _Verified, new: _Verified
) -> AssociationState:
    _not_replayed(state, [existing, new])
    if new.signer != new_id:
        raise AssociationError(f"the new member {new_id} did not sign (signer: {new.signer})")
    if new.signer == existing.signer:
        raise AssociationError(f"{new_id} cannot add itself")
    _allowed(new_id.kind, new, "the new member's signature")
    member = state.members.get(existing.signer)
    if member is not None:
        _same_chain(state, existing)
        adder = member.identifier
    elif existing.signer == state.recovery:
        adder = state.recovery
    else:
        raise AssociationError(
            f"{existing.signer} is neither a member of inbox {state.inbox_id} nor its "
            "recovery identifier"
        )
    _allowed(adder.kind, existing, "the existing member's signature")
    if adder.kind is MemberKind.INSTALLATION and new_id.kind is MemberKind.INSTALLATION:
        raise AssociationError("an installation cannot add another installation")
    members = dict(state.members)
    members[new_id] = Member(new_id, adder, new.chain_id)
    return replace(state, members=members)


def _revoke(state: AssociationState, gone: MemberId, recovery: _Verified) -> AssociationState:
    _not_replayed(state, [recovery])
    _same_chain(state, recovery)
    if recovery.signer != state.recovery:
        raise AssociationError(
            f"revocation is signed by {recovery.signer}, not the recovery identifier "
            f"{state.recovery}"
        )
    members = {
        k: m
        for k, m in state.members.items()
        if k != gone and not (m.added_by == gone and k.kind is MemberKind.INSTALLATION)
    }
    return replace(state, members=members)


def _change_recovery(
    state: AssociationState, new: MemberId, recovery: _Verified
) -> AssociationState:
    _not_replayed(state, [recovery])
    _same_chain(state, recovery)
    if recovery.signer != state.recovery:
        raise AssociationError(
            f"recovery change is signed by {recovery.signer}, not the recovery identifier "
            f"{state.recovery}"
        )
    return replace(state, recovery=new)


def _apply_action(
    state: AssociationState | None,
    action: association_pb2.IdentityAction,
    verified: list[_Verified],
    index: int,
) -> AssociationState:
    kind = action.WhichOneof("kind")
    if kind == "create_inbox":
        return _create(state, action.create_inbox, verified[0])
    if state is None:
        raise AssociationError(f"actions[{index}]: the inbox has not been created")
    if kind == "add":
        new_id = member_of(action.add.new_member_identifier, "new_member_identifier")
        return _add(state, new_id, verified[0], verified[1])
    if kind == "revoke":
        return _revoke(state, member_of(action.revoke.member_to_revoke, "member"), verified[0])
    change = action.change_recovery_address
    new = identifier_of(change.new_recovery_identifier, change.new_recovery_identifier_kind)
    return _change_recovery(state, new, verified[0])


def apply_update(
    state: AssociationState | None,
    update: association_pb2.IdentityUpdate,
    wallets: Mapping[WalletCheck, bool] | None = None,
) -> AssociationState:
    """The state after `update`, every signature verified; `wallets` answers the update's
    `wallet_checks`. Raises AssociationError when the update does not apply."""
    if not update.actions:
        raise AssociationError("the update has no actions")
    text = signature_text(update)
    digest = personal_sign_digest(text)
    answers = wallets or {}
    current = state
    seen: list[bytes] = []
    for index, action in enumerate(update.actions):
        try:
            verified = [_verify(s, text, digest, answers) for s in _signatures(action)]
            current = _apply_action(current, action, verified, index)
        except AssociationError as exc:
            raise AssociationError(
                f"actions[{index}] ({action.WhichOneof('kind')}): {exc}"
            ) from None
        seen.extend(v.raw for v in verified)
    assert current is not None  # the first action created it or raised
    if current.inbox_id != update.inbox_id:
        raise AssociationError(
            f"the update names inbox {update.inbox_id}, but its actions apply to {current.inbox_id}"
        )
    return replace(current, seen_signatures=current.seen_signatures | frozenset(seen))
