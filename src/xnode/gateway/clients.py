"""Who a gateway client is: the name of the API key it presents (`authorization: Bearer KEY`
or `x-api-key: KEY`), the subject of a JWT an application's backend signed for it
(`authorization: Bearer JWT`, checked against the gateway's configured public keys), or,
where the gateway takes neither (a devnet), its IP address.

Limits and usage are kept per client. With keys configured, a request without a valid one is
UNAUTHENTICATED before any work.

JWTs: signed with ES256, EdDSA or RS256 (the algorithm follows from the configured key, never
from the token's header, so a token cannot pick a weaker check); `exp` and `sub` required;
`aud` and `iss` checked when configured. The client is `jwt:SUB` (with `iss` set,
`jwt:ISS/SUB`), so two issuers' subjects do not share limits."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

LEEWAY_S = 30  # clock skew allowed on exp and nbf


class Unauthenticated(Exception):
    pass


def parse_api_keys(text: str) -> dict[str, str]:
    """`name=key,name=key` -> {key: name}; names and keys must be non-empty and unique."""
    keys: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, sep, key = (part.strip() for part in item.partition("="))
        if not (sep and name and key):
            raise ValueError("api_keys: expected name=key, comma separated")
        if key in keys or name in keys.values():
            raise ValueError(f"api_keys: {name!r} or its key is listed twice")
        keys[key] = name
    return keys


def _presented(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    for name, value in metadata:
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if name == "x-api-key":
            return text.strip()
        if name == "authorization" and text.lower().startswith("bearer "):
            return text[len("bearer ") :].strip()
    return None


@dataclass(frozen=True)
class JwtPolicy:
    """Public keys that sign client tokens, each with its algorithm; optional audience and
    issuer the tokens must name."""

    keys: Sequence[tuple[str, object]]
    audience: str | None = None
    issuer: str | None = None


def _algorithm_of(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key, rsa.RSAPublicKey):
        return "RS256"
    raise ValueError(f"jwt keys: {type(key).__name__} is not a P-256, Ed25519 or RSA public key")


def load_jwt_keys(pem: bytes) -> list[tuple[str, object]]:
    """Every PEM public key in the file, with the algorithm it verifies."""
    marker = b"-----END PUBLIC KEY-----"
    blocks = [b + marker for b in pem.split(marker) if b"-----BEGIN PUBLIC KEY-----" in b]
    if not blocks:
        raise ValueError("jwt keys: no PEM public key (-----BEGIN PUBLIC KEY-----) in the file")
    keys: list[tuple[str, object]] = []
    for i, block in enumerate(blocks):
        try:
            key = load_pem_public_key(block.strip())
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ValueError(f"jwt keys: PEM block {i + 1} is not a public key ({exc})") from None
        keys.append((_algorithm_of(key), key))
    return keys


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("ey")


class ClientAuth:
    def __init__(self, keys: Mapping[str, str], tokens: JwtPolicy | None = None) -> None:
        self._keys = dict(keys)  # key -> client name
        self._tokens = tokens

    @property
    def required(self) -> bool:
        return bool(self._keys) or self._tokens is not None

    def client_of(self, metadata: Iterable[tuple[str, str | bytes]], address: str) -> str:
        """The client's name for limits and usage (`address`: where it calls from, as
        api.proxies.ClientAddresses tells); raises Unauthenticated."""
        if not self.required:
            return f"ip:{address}"
        presented = _presented(metadata)
        if presented is None:
            raise Unauthenticated(f"{self._wanted()} is required (authorization: Bearer ...)")
        if self._tokens is not None and _looks_like_jwt(presented):
            return self._subject(presented, self._tokens)
        for key, name in self._keys.items():  # constant time per key: no early mismatch
            if hmac.compare_digest(key.encode(), presented.encode()):
                return name
        raise Unauthenticated("unknown API key" if self._keys else "not a JWT")

    def _wanted(self) -> str:
        if self._keys and self._tokens is not None:
            return "an API key or a JWT"
        return "an API key" if self._keys else "a JWT"

    @staticmethod
    def _subject(token: str, policy: JwtPolicy) -> str:
        options = {"require": ["exp", "sub"], "verify_aud": policy.audience is not None}
        last = "no configured key verifies its signature"
        for algorithm, key in policy.keys:
            try:
                claims = jwt.decode(
                    token,
                    key,  # type: ignore[arg-type]
                    algorithms=[algorithm],
                    audience=policy.audience,
                    issuer=policy.issuer,
                    leeway=LEEWAY_S,
                    options=options,  # type: ignore[arg-type]
                )
            except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError):
                continue  # another configured key may have signed it
            except jwt.PyJWTError as exc:
                last = str(exc)
                break
            subject, issuer = str(claims["sub"]), claims.get("iss")
            return f"jwt:{issuer}/{subject}" if issuer else f"jwt:{subject}"
        raise Unauthenticated(f"JWT refused: {last}")
