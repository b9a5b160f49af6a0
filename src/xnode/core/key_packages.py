"""MLS key packages (RFC 9420 section 10) as a node checks them before storing one.

    KeyPackage   = version u16 | cipher_suite u16 | init_key<V> | LeafNode
                   | extensions<V> | signature<V>            (signed: all before signature)
    LeafNode     = encryption_key<V> | signature_key<V> | Credential | Capabilities
                   | leaf_node_source u8 (1 = key_package) | Lifetime | extensions<V>
                   | signature<V>                            (signed: all before signature)
    Credential   = credential_type u16 | identity<V> (basic) or certificates<V> (x509)
    Capabilities = versions<V> | cipher_suites<V> | extensions<V> | proposals<V>
                   | credentials<V>
    Lifetime     = not_before u64 | not_after u64           (unix seconds)

Both signatures are SignWithLabel (section 5.1.2): Ed25519 by the leaf's signature_key over
SignContent = label<V> ("MLS 1.0 " + "LeafNodeTBS" / "KeyPackageTBS") | content<V>.
A key package's own extensions and capabilities are read for their framing only.
"""

from __future__ import annotations

from dataclasses import dataclass

from Crypto.Signature import eddsa
from nacl.exceptions import CryptoError
from nacl.signing import VerifyKey

from xnode.core.mls import MLS10, MlsError, Reader, vector_bytes

# Cipher suites whose signature scheme is Ed25519: 1 (X25519/AES128GCM/SHA256, what libxmtp
# uses) and 3 (X25519/ChaCha20Poly1305/SHA256). Others are refused: their signatures would
# go unchecked.
ED25519_SUITES = frozenset({1, 3})
LEAF_SOURCE_KEY_PACKAGE = 1
CREDENTIAL_BASIC = 1
CREDENTIAL_X509 = 2
# Clocks differ: a lifetime starting this far after the time it is judged at is still
# accepted. Verifiers judge at the envelope's signed timestamp, which the originator stamps
# after its own check at publish (a moment later, or more if its clock stepped back: stamps
# never go back), so they also accept a lifetime that ended this long before the stamp.
LIFETIME_SKEW_S = 3600
# At publish a lifetime must last this much longer than now: a key package about to expire
# is refused before it is stamped, not accepted by the originator and refused by verifiers.
STAMP_GRACE_S = 300


@dataclass(frozen=True, slots=True)
class KeyPackage:
    cipher_suite: int
    init_key: bytes
    signature_key: bytes  # the leaf's Ed25519 key: the installation key in XMTP
    credential_identity: bytes
    not_before: int
    not_after: int


def _verify(key: bytes, label: bytes, content: bytes, signature: bytes, what: str) -> None:
    # libsodium's Ed25519 (PyNaCl): the fastest verification here (ahead of OpenSSL through
    # `cryptography` and of pycryptodome), and the two a key package needs were most of its
    # check (docs/benchmarks.md, "Measurements behind choices in the code"). libsodium also
    # refuses small-order keys and non-canonical encodings, which no honest client makes.
    sign_content = vector_bytes(b"MLS 1.0 " + label) + vector_bytes(content)
    if len(key) != 32:
        raise MlsError("leaf_node.signature_key: not an Ed25519 public key (32 bytes)")
    if len(signature) != 64:
        raise MlsError(f"{what}: an Ed25519 signature is 64 bytes, not {len(signature)}")
    try:
        VerifyKey(key).verify(sign_content, signature)
    except (CryptoError, ValueError, TypeError):
        raise MlsError(f"{what}: the signature does not verify") from None


def _credential(reader: Reader) -> bytes:
    kind = reader.uint(2)
    if kind == CREDENTIAL_BASIC:
        return reader.vector()
    if kind == CREDENTIAL_X509:
        certificates = Reader(reader.vector())
        while certificates.position < certificates.length:
            certificates.vector()
        return b""
    raise MlsError(f"leaf_node.credential: credential type {kind} is not basic or x509")


def _field(reader: Reader, what: str) -> bytes:
    try:
        return reader.vector()
    except MlsError as exc:
        raise MlsError(f"{what}: {exc}") from None


def _signature_key(reader: Reader) -> bytes:
    key = _field(reader, "leaf_node.signature_key")
    if len(key) != 32:
        raise MlsError(f"leaf_node.signature_key: {len(key)} bytes, an Ed25519 key has 32")
    return key


def parse_key_package(data: bytes, at_s: int, until_s: int | None = None) -> KeyPackage:
    """The checked key package; raises MlsError naming the field that is wrong. Its lifetime
    must have begun by `at_s` (give or take LIFETIME_SKEW_S) and last until `until_s`
    (default `at_s`): core.envelopes chooses both, at publish and for envelopes received."""
    reader = Reader(data)
    version = reader.uint(2)
    if version != MLS10:
        raise MlsError(f"version: {version} is not mls10 (1)")
    suite = reader.uint(2)
    if suite not in ED25519_SUITES:
        raise MlsError(f"cipher_suite: {suite} is not one in use ({sorted(ED25519_SUITES)})")
    init_key = _field(reader, "init_key")
    leaf_start = reader.position
    _field(reader, "leaf_node.encryption_key")
    signature_key = _signature_key(reader)
    identity = _credential(reader)
    for part in ("versions", "cipher_suites", "extensions", "proposals", "credentials"):
        _field(reader, f"leaf_node.capabilities.{part}")
    source = reader.uint(1)
    if source != LEAF_SOURCE_KEY_PACKAGE:
        raise MlsError(f"leaf_node.leaf_node_source: {source} is not key_package (1)")
    not_before, not_after = reader.uint(8), reader.uint(8)
    _field(reader, "leaf_node.extensions")
    leaf_tbs = data[leaf_start : reader.position]
    leaf_signature = _field(reader, "leaf_node.signature")
    _field(reader, "extensions")
    package_tbs = data[: reader.position]
    package_signature = _field(reader, "signature")
    reader.done("key package")
    until = at_s if until_s is None else until_s
    if not_before - LIFETIME_SKEW_S > at_s:
        raise MlsError(
            f"leaf_node.lifetime: begins at {not_before}, more than {LIFETIME_SKEW_S} s after "
            f"{at_s}, the time it is judged at (unix seconds)"
        )
    if until > not_after:
        raise MlsError(f"leaf_node.lifetime: ends at {not_after}, before {until} (unix seconds)")
    _verify(signature_key, b"LeafNodeTBS", leaf_tbs, leaf_signature, "leaf_node.signature")
    _verify(signature_key, b"KeyPackageTBS", package_tbs, package_signature, "signature")
    return KeyPackage(suite, init_key, signature_key, identity, not_before, not_after)


def _sign(seed: bytes, label: bytes, content: bytes) -> bytes:
    key = eddsa.import_private_key(seed)
    sign_content = vector_bytes(b"MLS 1.0 " + label) + vector_bytes(content)
    return bytes(eddsa.new(key, "rfc8032").sign(sign_content))


def installation_key_of(seed: bytes) -> bytes:
    """The Ed25519 public key of a 32-byte seed: the key package topic's identifier."""
    point = eddsa.import_private_key(seed).public_key()
    return bytes(point.export_key(format="raw"))


def encode_key_package(seed: bytes, now_s: int, lifetime_s: int = 90 * 86_400) -> bytes:
    """A key package that passes parse_key_package, signed with the Ed25519 seed (tests and
    tools; its HPKE keys are stand-ins)."""
    suite = 1
    leaf_tbs = (
        vector_bytes(b"\x01" * 32)  # encryption_key
        + vector_bytes(installation_key_of(seed))
        + CREDENTIAL_BASIC.to_bytes(2, "big")
        + vector_bytes(b"xnode")
        + vector_bytes(MLS10.to_bytes(2, "big"))  # capabilities.versions
        + vector_bytes(suite.to_bytes(2, "big"))
        + vector_bytes(b"")
        + vector_bytes(b"")
        + vector_bytes(CREDENTIAL_BASIC.to_bytes(2, "big"))
        + bytes([LEAF_SOURCE_KEY_PACKAGE])
        + now_s.to_bytes(8, "big")
        + (now_s + lifetime_s).to_bytes(8, "big")
        + vector_bytes(b"")  # leaf extensions
    )
    leaf = leaf_tbs + vector_bytes(_sign(seed, b"LeafNodeTBS", leaf_tbs))
    package_tbs = (
        MLS10.to_bytes(2, "big")
        + suite.to_bytes(2, "big")
        + vector_bytes(b"\x02" * 32)  # init_key
        + leaf
        + vector_bytes(b"")  # extensions
    )
    return package_tbs + vector_bytes(_sign(seed, b"KeyPackageTBS", package_tbs))
