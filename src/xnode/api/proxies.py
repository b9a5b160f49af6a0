"""The client address of a call (gRPC, or gRPC-web on the HTTP port) for the API limits:
its peer, or the client a trusted proxy names in `x-forwarded-for` (core.proxies)."""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

import structlog

from xnode.core.proxies import FORWARDED_FOR, ForwardedForError, TrustedProxies, client_address
from xnode.usecases.limits import Caller

log = structlog.get_logger(__name__)

# Proxies whose malformed header was logged, and headers already read: each forgotten all at
# once past this many.
MAX_KEPT = 4096
NO_PROXIES = TrustedProxies()


class CallContext(Protocol):
    """What is read of a grpc.aio.ServicerContext (or api.http.HttpContext)."""

    def peer(self) -> str: ...

    def invocation_metadata(self) -> Any: ...


class ClientAddresses:
    def __init__(self, trusted: TrustedProxies = NO_PROXIES) -> None:
        self._trusted = trusted
        self._warned: set[str] = set()
        # A proxy sends the same header for a client call after call; reading it parses
        # every address it walks (ipaddress), several microseconds each.
        self._read: dict[tuple[str, tuple[str, ...]], str] = {}

    def of(self, context: CallContext) -> str:
        """The address the call is limited as. A trusted proxy's malformed header is its own
        fault: the call is limited as the proxy, and that is logged once per proxy."""
        peer = Caller.from_peer(context.peer()).ip
        if not self._trusted:
            return peer
        forwarded = tuple(
            value.decode(errors="replace") if isinstance(value, bytes) else value
            for key, value in context.invocation_metadata() or ()
            if key == FORWARDED_FOR
        )
        if not forwarded:
            return peer
        found = self._read.get((peer, forwarded))
        if found is None:
            found = self._resolve(peer, forwarded)
            if len(self._read) >= MAX_KEPT:
                self._read.clear()
            self._read[(peer, forwarded)] = found
        return found

    def _resolve(self, peer: str, forwarded: tuple[str, ...]) -> str:
        try:
            return client_address(peer, forwarded, self._trusted)
        except ForwardedForError as exc:
            if peer not in self._warned:
                if len(self._warned) >= MAX_KEPT:
                    self._warned.clear()
                self._warned.add(peer)
                log.warning(
                    "forwarded_for_malformed",
                    proxy=peer,
                    header=", ".join(forwarded),
                    error=str(exc),
                    limited_as="the proxy",
                )
            return peer


def forwarded_for(address: str) -> tuple[tuple[str, str], ...]:
    """The metadata that names `address` to the next hop (nothing when it is no IP address,
    e.g. a Unix socket's path: the next hop limits the caller as the one calling it)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return ()
    return ((FORWARDED_FOR, address),)
