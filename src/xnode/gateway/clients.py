"""Who a gateway client is: the name of the API key it presents (`authorization: Bearer KEY`
or `x-api-key: KEY`), or, where the gateway has no keys (a devnet), its IP address.

Limits and usage are kept per client. With keys configured, a request without a valid one is
UNAUTHENTICATED before any work."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

from xnode.usecases.limits import Caller


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


class ClientAuth:
    def __init__(self, keys: Mapping[str, str]) -> None:
        self._keys = dict(keys)  # key -> client name

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def client_of(self, metadata: Iterable[tuple[str, str | bytes]], peer: str | None) -> str:
        """The client's name for limits and usage; raises Unauthenticated."""
        if not self._keys:
            return f"ip:{Caller.from_peer(peer).ip}"
        presented = _presented(metadata)
        if presented is None:
            raise Unauthenticated("an API key is required (authorization: Bearer KEY)")
        for key, name in self._keys.items():  # constant time per key: no early mismatch
            if hmac.compare_digest(key.encode(), presented.encode()):
                return name
        raise Unauthenticated("unknown API key")
