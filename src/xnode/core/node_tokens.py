"""Node-to-node tokens (XIP-49 3.2.5, docs/protocol.md).

A JWT with header {"alg":"ES256K","typ":"JWT"}, claims sub (sender node id), aud ([receiver
node id]), iat and exp = iat + 1 h. Its signature is the network's own ES256K: a 65-byte
recoverable secp256k1 signature over keccak256(b"jwt|" + signing input). PyJWT's stock ES256K
hashes with SHA-256, so this module registers its own algorithm on a private PyJWS instance.

Read-only tokens (XIP-49 3.4, our extension): a read-only node has no registry entry, so its
token's subject is the 0x address of its own key instead of a node id; the signature must
recover to that address. Peers that accept them let the holder replicate (SubscribeOriginators)
under limits of its own, lower than a registered node's; nothing else is trusted from them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import jwt
from jwt.algorithms import Algorithm
from jwt.exceptions import InvalidKeyError
from jwt.utils import base64url_decode

from xnode.core.crypto import (
    PUBLIC_KEY_LENGTH,
    SignatureError,
    SigningKey,
    address_of,
    jwt_digest,
)
from xnode.core.crypto import recover_public_key as _recover
from xnode.core.registry import Registry

ALGORITHM = "ES256K"
TOKEN_LIFETIME_S = 3600
MAX_TOKEN_AGE_S = 3600  # XIP: iat no less than 1 hour in the past...
MAX_CLOCK_SKEW_S = 60  # ...and no more than 1 minute in the future
RENEW_MARGIN_S = 300  # clients replace a token this long before it expires

# gRPC metadata keys, lower case as gRPC carries them.
METADATA_KEY = "node-authorization"
XIP_METADATA_KEY = "authorization"
# Initial metadata on accepted replication streams: the serving node's vector clock, a
# serialized Cursor (peers use it for their lag metrics).
CLOCK_METADATA = "xnode-vector-clock-bin"


class KeccakES256K(Algorithm):
    """ES256K as the network defines it. Keys: a 32-byte secret signs, a 65-byte public key
    verifies (by comparing it with the key the signature recovers to)."""

    def prepare_key(self, key: Any) -> Any:
        if isinstance(key, bytes) and len(key) == 32:
            return SigningKey(key)
        if isinstance(key, bytes) and len(key) == PUBLIC_KEY_LENGTH and key[0] == 4:
            return key
        raise InvalidKeyError("ES256K key must be a 32-byte secret or a 65-byte public key")

    def sign(self, msg: bytes, key: Any) -> bytes:
        if not isinstance(key, SigningKey):
            raise InvalidKeyError("signing needs the node's private key")
        return key.sign(jwt_digest(msg))

    def verify(self, msg: bytes, key: Any, sig: bytes) -> bool:
        try:
            return bool(_recover(sig, jwt_digest(msg)) == key)
        except SignatureError:
            return False

    @staticmethod
    def to_jwk(key_obj: Any, as_dict: bool = False) -> Any:
        raise NotImplementedError("node keys are not exchanged as JWKs")

    @staticmethod
    def from_jwk(jwk: Any) -> Any:
        raise NotImplementedError("node keys are not exchanged as JWKs")


def _codec() -> jwt.PyJWT:
    jws = jwt.PyJWS(algorithms=[])  # nothing but the network's ES256K is accepted
    jws.register_algorithm(ALGORITHM, KeccakES256K())
    codec = jwt.PyJWT()
    codec._jws = jws  # PyJWT has no public hook for its JWS instance; its own module does this
    return codec


_JWT = _codec()


class AuthError(Exception):
    """A token this node refuses; the message says why."""


def read_only_subject(public_key: bytes) -> str:
    """The subject of a read-only node's tokens: the 0x address of its key."""
    return "0x" + address_of(public_key).hex()


def issue_token(key: SigningKey, subject: int | None, audience: int, now: int) -> str:
    """A node token; `subject` None: a read-only token (its subject is the key's address)."""
    claims = {
        "sub": str(subject) if subject is not None else read_only_subject(key.public_key),
        "aud": [str(audience)],
        "iat": now,
        "exp": now + TOKEN_LIFETIME_S,
    }
    return _JWT.encode(claims, key.secret, algorithm=ALGORITHM)


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """The verified sender of a token: a registered node, or (node_id None) a read-only node
    known only by its key's address."""

    node_id: int | None
    expires_at: int
    address: bytes | None = None

    @property
    def read_only(self) -> bool:
        return self.node_id is None


_NODE_ID = re.compile(r"[0-9]{1,10}")


def _subject(token: str) -> int | bytes:
    """A node id, or the 20-byte address a read-only token names."""
    try:
        header = jwt.get_unverified_header(token)
        claims = _JWT.decode(token, options={"verify_signature": False})
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise AuthError(f"token does not decode: {exc}") from None
    if header.get("alg") != ALGORITHM:
        raise AuthError(f"token algorithm must be {ALGORITHM}, got {header.get('alg')!r}")
    sub = claims.get("sub")
    if isinstance(sub, str) and sub.startswith("0x") and len(sub) == 42:
        try:
            return bytes.fromhex(sub[2:])
        except ValueError:
            pass
    # ASCII digits only, as many as a uint32 node id has: str.isdigit() also accepts "²",
    # which int() refuses, and int() refuses numbers of more than 4,300 digits.
    if not isinstance(sub, str) or _NODE_ID.fullmatch(sub) is None:
        raise AuthError(
            f"token subject must be a node id (decimal string) or, for a read-only node, "
            f"a 0x address; got {sub!r}"
        )
    return int(sub)


def _check_times(claims: dict[str, Any], now: int) -> int:
    """The time the token stops being trusted: its exp, but no later than an hour after its
    iat (a token made to last ten years is good for an hour, as the XIP's tokens are)."""
    iat, exp = claims["iat"], claims["exp"]
    if not _is_time(iat) or not _is_time(exp):
        raise AuthError("token iat and exp must be integers")
    if exp <= now:
        raise AuthError(f"token expired {now - exp} s ago")
    if iat <= now - MAX_TOKEN_AGE_S:
        raise AuthError(f"token was issued {now - iat} s ago; the limit is {MAX_TOKEN_AGE_S} s")
    if iat > now + MAX_CLOCK_SKEW_S:
        raise AuthError(f"token is issued {iat - now} s in the future")
    return int(min(exp, iat + MAX_TOKEN_AGE_S))


def _is_time(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _signer_key(token: str) -> bytes:
    """The public key a token's signature recovers to (read-only tokens name no registry key)."""
    signing_input, _, signature = token.rpartition(".")
    try:
        return _recover(base64url_decode(signature), jwt_digest(signing_input.encode()))
    except (SignatureError, ValueError) as exc:
        raise AuthError(f"token signature does not recover: {exc}") from None


def _read_only_key(token: str, address: bytes) -> bytes:
    key = _signer_key(token)
    if address_of(key) != address:
        raise AuthError(f"token signature does not recover to its subject 0x{address.hex()}")
    return key


def verify_token(
    token: str, registry: Registry, self_id: int, now: int, read_only: bool = False
) -> NodeIdentity:
    """The checks of XIP-49 3.2.5; raises AuthError naming the first that fails.
    `read_only`: tokens of read-only nodes (subject an address) are accepted too."""
    try:
        return _verified(token, registry, self_id, now, read_only)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        # Whatever a stranger puts in a token is a refusal (UNAUTHENTICATED), never an
        # error of this node's.
        raise AuthError(f"token is malformed: {type(exc).__name__}: {exc}") from None


def _verified(
    token: str, registry: Registry, self_id: int, now: int, read_only: bool
) -> NodeIdentity:
    subject = _subject(token)
    if isinstance(subject, bytes):
        if not read_only:
            raise AuthError("read-only node tokens are not accepted by this node")
        claims = _claims(token, _read_only_key(token, subject), self_id, f"0x{subject.hex()}")
        return NodeIdentity(None, _check_times(claims, now), subject)
    entry = registry.get(subject)
    if entry is None:
        raise AuthError(f"node {subject} is not registered")
    if not entry.enabled:
        raise AuthError(f"node {subject} is disabled in the registry")
    claims = _claims(token, entry.public_key, self_id, f"node {subject}'s registry key")
    return NodeIdentity(subject, _check_times(claims, now))


def _claims(token: str, key: bytes, self_id: int, signer: str) -> dict[str, Any]:
    try:
        return _JWT.decode(
            token,
            key=key,
            algorithms=[ALGORITHM],
            audience=str(self_id),
            # Times are checked below against `now`, with the XIP's window.
            options={
                "require": ["sub", "aud", "iat", "exp"],
                "verify_exp": False,
                "verify_iat": False,
            },
        )
    except jwt.InvalidAudienceError:
        raise AuthError(f"token audience is not this node ({self_id})") from None
    except jwt.InvalidSignatureError:
        raise AuthError(f"token signature does not recover to {signer}") from None
    except jwt.PyJWTError as exc:
        raise AuthError(f"token refused: {exc}") from None


def token_from_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> str:
    """The token from `node-authorization`, else `authorization` (with or without "Bearer ")."""
    found: dict[str, str] = {}
    for key, value in metadata:
        if key in (METADATA_KEY, XIP_METADATA_KEY) and isinstance(value, str):
            found.setdefault(key, value)
    value = found.get(METADATA_KEY) or found.get(XIP_METADATA_KEY) or ""
    if not value:
        raise AuthError(f"no node token: send it as `{METADATA_KEY}` metadata")
    scheme, _, rest = value.partition(" ")
    return rest.strip() if scheme.lower() == "bearer" and rest else value.strip()


@dataclass
class TokenProvider:
    """One token per peer, reused until it is close to expiry; `node_id` None: a read-only
    node's tokens."""

    key: SigningKey
    node_id: int | None
    clock: Callable[[], float]
    _tokens: dict[int, tuple[str, int]] = field(default_factory=dict)

    def token_for(self, peer_id: int) -> str:
        now = int(self.clock())
        cached = self._tokens.get(peer_id)
        if cached is not None and now < cached[1] - RENEW_MARGIN_S:
            return cached[0]
        token = issue_token(self.key, self.node_id, peer_id, now)
        self._tokens[peer_id] = (token, now + TOKEN_LIFETIME_S)
        return token

    def metadata_for(self, peer_id: int) -> tuple[tuple[str, str], ...]:
        return ((METADATA_KEY, self.token_for(peer_id)),)
