"""Signers that make XIP-46 identity updates the way libxmtp does, for the tests: a wallet
(EIP-191 personal_sign), an installation key (Ed25519ph, context "IDENTITY UPDATE
SIGNATURE") and a passkey (P-256 WebAuthn)."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field

from Crypto.Hash import SHA512
from Crypto.PublicKey import ECC
from Crypto.Signature import eddsa
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from xmtp.identity.associations import association_pb2 as a
from xmtp.identity.associations import signature_pb2 as s
from xnode.core.associations import (
    INSTALLATION_KEY_CONTEXT,
    inbox_id_of,
    personal_sign_digest,
    signature_text,
)
from xnode.core.associations import ethereum as ethereum_id
from xnode.core.crypto import SigningKey


@dataclass
class Wallet:
    key: SigningKey = field(default_factory=SigningKey.generate)

    @property
    def address(self) -> str:
        return "0x" + self.key.address.hex()

    def member(self) -> a.MemberIdentifier:
        return a.MemberIdentifier(ethereum_address=self.address)

    def sign(self, text: str) -> s.Signature:
        raw = self.key.sign(personal_sign_digest(text))
        return s.Signature(
            erc_191=s.RecoverableEcdsaSignature(bytes=raw[:64] + bytes([raw[64] + 27]))
        )


@dataclass
class Installation:
    key: ECC.EccKey = field(default_factory=lambda: ECC.generate(curve="Ed25519"))

    @property
    def public_key(self) -> bytes:
        return bytes(self.key.public_key().export_key(format="raw"))

    def member(self) -> a.MemberIdentifier:
        return a.MemberIdentifier(installation_public_key=self.public_key)

    def sign(self, text: str) -> s.Signature:
        signer = eddsa.new(self.key, "rfc8032", context=INSTALLATION_KEY_CONTEXT)
        raw = signer.sign(SHA512.new(text.encode()))
        return s.Signature(
            installation_key=s.RecoverableEd25519Signature(bytes=raw, public_key=self.public_key)
        )


@dataclass
class Passkey:
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )

    @property
    def public_key(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )

    def member(self) -> a.MemberIdentifier:
        return a.MemberIdentifier(passkey=a.Passkey(key=self.public_key))

    def sign(self, text: str) -> s.Signature:
        challenge = base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()
        client_data = json.dumps(
            {"type": "webauthn.get", "challenge": challenge, "origin": "https://xmtp.example"}
        ).encode()
        authenticator = hashlib.sha256(b"xmtp.example").digest() + b"\x05\x00\x00\x00\x01"
        signature = self.key.sign(
            authenticator + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
        )
        return s.Signature(
            passkey=s.RecoverablePasskeySignature(
                public_key=self.public_key,
                signature=signature,
                authenticator_data=authenticator,
                client_data_json=client_data,
            )
        )


Signer = Wallet | Installation | Passkey


def inbox_of(wallet: Wallet, nonce: int = 0) -> str:
    return inbox_id_of(ethereum_id(wallet.address), nonce)


def create(wallet: Wallet, nonce: int = 0) -> a.IdentityAction:
    return a.IdentityAction(
        create_inbox=a.CreateInbox(
            initial_identifier=wallet.address,
            nonce=nonce,
            initial_identifier_kind=a.IDENTIFIER_KIND_ETHEREUM,
        )
    )


def add(new: Signer) -> a.IdentityAction:
    return a.IdentityAction(add=a.AddAssociation(new_member_identifier=new.member()))


def revoke(gone: Signer) -> a.IdentityAction:
    return a.IdentityAction(revoke=a.RevokeAssociation(member_to_revoke=gone.member()))


def change_recovery(new: Wallet) -> a.IdentityAction:
    return a.IdentityAction(
        change_recovery_address=a.ChangeRecoveryAddress(
            new_recovery_identifier=new.address,
            new_recovery_identifier_kind=a.IDENTIFIER_KIND_ETHEREUM,
        )
    )


def signed(
    inbox_id: str, actions: list[tuple[a.IdentityAction, list[Signer]]], ts: int = 1_795_466_270
) -> a.IdentityUpdate:
    """An update whose actions are signed, in their signature fields' order, by the signers
    listed with each (create: owner; add: existing member, new member; revoke and change:
    the recovery identifier)."""
    update = a.IdentityUpdate(
        inbox_id=inbox_id,
        client_timestamp_ns=ts * 1_000_000_000,
        actions=[action for action, _ in actions],
    )
    text = signature_text(update)
    for action, (_, signers) in zip(update.actions, actions, strict=True):
        kind = action.WhichOneof("kind")
        sigs = [signer.sign(text) for signer in signers]
        if kind == "create_inbox":
            action.create_inbox.initial_identifier_signature.CopyFrom(sigs[0])
        elif kind == "add":
            action.add.existing_member_signature.CopyFrom(sigs[0])
            action.add.new_member_signature.CopyFrom(sigs[1])
        elif kind == "revoke":
            action.revoke.recovery_identifier_signature.CopyFrom(sigs[0])
        else:
            action.change_recovery_address.existing_recovery_identifier_signature.CopyFrom(sigs[0])
    return update


@dataclass
class Inbox:
    """An inbox owned by a wallet, making signed updates with increasing timestamps."""

    owner: Wallet = field(default_factory=Wallet)
    nonce: int = 0
    _ts: int = 1_795_466_270

    @property
    def id(self) -> str:
        return inbox_of(self.owner, self.nonce)

    @property
    def key(self) -> bytes:
        return bytes.fromhex(self.id)

    def update(self, *actions: tuple[a.IdentityAction, list[Signer]]) -> a.IdentityUpdate:
        self._ts += 1
        return signed(self.id, list(actions), self._ts)

    def create(self, *more: tuple[a.IdentityAction, list[Signer]]) -> a.IdentityUpdate:
        return self.update((create(self.owner, self.nonce), [self.owner]), *more)

    def add(self, *members: Signer) -> a.IdentityUpdate:
        return self.update(*((add(m), self._signers(m)) for m in members))

    def revoke(self, *members: Signer) -> a.IdentityUpdate:
        return self.update(*((revoke(m), self._signers()) for m in members))

    def _signers(self, *others: Signer) -> list[Signer]:
        return [self.owner, *others]
