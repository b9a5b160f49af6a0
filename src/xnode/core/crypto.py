"""Keccak-256 hashing and recoverable secp256k1 signatures, domain separated (docs/protocol.md)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from coincurve import PrivateKey
from coincurve._libsecp256k1 import ffi, lib
from coincurve.context import GLOBAL_CONTEXT
from sha3 import keccak_256  # safe-pysha3

SIGNATURE_LENGTH = 65
PUBLIC_KEY_LENGTH = 65
SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_HALF_ORDER = SECP256K1_ORDER // 2


class SignatureError(ValueError):
    """A signature that is malformed or does not recover to a public key."""


def keccak256(*parts: bytes) -> bytes:
    # safe-pysha3's C Keccak: the fastest per call that installs here (docs/benchmarks.md);
    # one call with joined bytes, as each call has a fixed cost.
    digest: bytes = keccak_256(b"".join(parts)).digest()
    return digest


# The digests every received envelope needs (two recoveries, an address) call keccak_256
# directly: one Python layer less each, on the replication path's CPU per envelope.


def payer_digest(target_originator: int, unsigned_client_envelope: bytes) -> bytes:
    digest: bytes = keccak_256(
        b"target|%spayer|%s" % (struct.pack(">I", target_originator), unsigned_client_envelope)
    ).digest()
    return digest


def originator_digest(unsigned_originator_envelope: bytes) -> bytes:
    digest: bytes = keccak_256(b"originator|" + unsigned_originator_envelope).digest()
    return digest


def jwt_digest(signing_input: bytes) -> bytes:
    return keccak256(b"jwt|", signing_input)


def misbehavior_digest(unsigned_misbehavior_report: bytes) -> bytes:
    return keccak256(b"misbehavior|", unsigned_misbehavior_report)


def checkpoint_digest(unsigned_checkpoint: bytes) -> bytes:
    """What an originator signs to commit its log up to a tree size (xnode.core.checkpoints)."""
    return keccak256(b"checkpoint|", unsigned_checkpoint)


def holdings_digest(unsigned_holdings: bytes) -> bytes:
    """What an originator signs to account for what it holds of its own log
    (xnode.core.withholding)."""
    return keccak256(b"holdings|", unsigned_holdings)


def completeness_digest(unsigned_answer: bytes) -> bytes:
    """What a node signs to answer "these are all of a topic's envelopes after a cursor"
    (xnode.core.completeness)."""
    return keccak256(b"completeness|", unsigned_answer)


def blockchain_proof_digest(unsigned_originator_envelope: bytes, transaction_hash: bytes) -> bytes:
    """What a node signs when it vouches for a payload it indexed from the chain."""
    return keccak256(b"blockchain|", transaction_hash, b"|", unsigned_originator_envelope)


def address_of(public_key: bytes) -> bytes:
    """The 20-byte Ethereum address of an uncompressed public key."""
    if len(public_key) != PUBLIC_KEY_LENGTH or public_key[0] != 4:
        raise SignatureError("public key must be 65 bytes, uncompressed, starting 0x04")
    digest: bytes = keccak_256(public_key[1:]).digest()
    return digest[-20:]


# libsecp256k1 called through coincurve's own cffi binding (coincurve is pinned): its
# PublicKey wrapper (a key object, then serializing it) is Python around every recovery, and
# every replicated envelope costs two (docs/benchmarks.md, "Measurements behind choices in
# the code"). cffi releases the GIL for the C calls, as the wrapper did.
_CONTEXT = GLOBAL_CONTEXT.ctx
_UNCOMPRESSED = lib.SECP256K1_EC_UNCOMPRESSED


def recover_public_key(signature: bytes, digest: bytes) -> bytes:
    """Recovers the uncompressed public key; rejects malformed and high-S signatures."""
    if len(signature) != SIGNATURE_LENGTH:
        raise SignatureError(f"signature must be {SIGNATURE_LENGTH} bytes, got {len(signature)}")
    if signature[64] > 1:
        raise SignatureError(f"recovery id must be 0 or 1, got {signature[64]}")
    if len(digest) != 32:
        raise SignatureError(f"digest must be 32 bytes, got {len(digest)}")
    s = int.from_bytes(signature[32:64], "big")
    if s == 0 or s > _HALF_ORDER:
        raise SignatureError("signature s value is zero or not low-S")
    parsed = ffi.new("secp256k1_ecdsa_recoverable_signature *")
    if not lib.secp256k1_ecdsa_recoverable_signature_parse_compact(
        _CONTEXT, parsed, signature, signature[64]
    ):
        raise SignatureError("signature does not recover: r or s is not below the curve order")
    key = ffi.new("secp256k1_pubkey *")
    if not lib.secp256k1_ecdsa_recover(_CONTEXT, key, parsed, digest):
        raise SignatureError("signature does not recover: no public key for it")
    out = ffi.new("unsigned char[65]")
    length = ffi.new("size_t *", PUBLIC_KEY_LENGTH)
    lib.secp256k1_ec_pubkey_serialize(_CONTEXT, out, length, key, _UNCOMPRESSED)
    return bytes(ffi.buffer(out, PUBLIC_KEY_LENGTH))


@dataclass(frozen=True)
class SigningKey:
    """A node's or payer's secp256k1 private key."""

    secret: bytes = field(repr=False)
    public_key: bytes = field(init=False)
    address: bytes = field(init=False)
    _key: PrivateKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.secret) != 32:
            raise ValueError("private key must be 32 bytes")
        key = PrivateKey(self.secret)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "public_key", bytes(key.public_key.format(compressed=False)))
        object.__setattr__(self, "address", address_of(self.public_key))

    @classmethod
    def from_hex(cls, text: str) -> SigningKey:
        return cls(bytes.fromhex(text.strip().removeprefix("0x")))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(PrivateKey().secret)

    def sign(self, digest: bytes) -> bytes:
        """A 65-byte r || s || v signature over a 32-byte digest; libsecp256k1 makes it low-S."""
        return bytes(self._key.sign_recoverable(digest, hasher=None))

    def hex(self) -> str:
        return self.secret.hex()


_signers: dict[bytes, SigningKey] = {}


def sign_digests(secret: bytes, digests: bytes) -> bytes:
    """The 65-byte signatures of the 32-byte digests laid end to end, in order."""
    key = _signers.get(secret)
    if key is None:
        key = _signers[secret] = SigningKey(secret)
    return b"".join(key.sign(digests[i : i + 32]) for i in range(0, len(digests), 32))
