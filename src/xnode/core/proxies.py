"""The address a request is limited as when it reaches us through proxies we trust.

A load balancer or a payer gateway in front of a node calls it for many clients from one
address; it names each client in `x-forwarded-for`, every proxy on the way appending the
address it received the request from. The header is only as good as the proxies that wrote
it: anyone can send one. So, like nginx's realip module with `real_ip_recursive on`, the
header is read only when the peer itself is a trusted proxy, from right to left, skipping
the addresses of other trusted proxies; the first address that is not trusted is the client.
Entries left of it were written by the client or its own proxies and are never read, so a
client cannot choose the address it is limited as. When every entry is trusted, the
left-most is the client (a proxy calling for itself)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FORWARDED_FOR = "x-forwarded-for"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ForwardedForError(ValueError):
    """A trusted proxy's header names no address where one was needed."""


def _plain(address: Address) -> Address:
    """An IPv4 client of a dual-stack socket (`::ffff:1.2.3.4`) as the IPv4 address it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_networks(text: str) -> tuple[Network, ...]:
    """`10.0.0.0/8, 192.0.2.7, 2001:db8::/32` -> networks (a bare address is itself alone);
    raises ValueError naming the entry that is not a network."""
    networks: list[Network] = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as exc:
            raise ValueError(f"{item!r} is not an address or a CIDR network: {exc}") from None
    return tuple(networks)


@dataclass(frozen=True)
class TrustedProxies:
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        return cls(parse_networks(text))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: str) -> bool:
        try:
            parsed = _plain(ipaddress.ip_address(address))
        except ValueError:
            return False  # a Unix socket's path, or no peer at all
        return self.contains(parsed)

    def contains(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


def _host(entry: str) -> str | None:
    """The address part of an entry; None when what follows it is no port."""
    if entry.startswith("["):
        host, closed, rest = entry[1:].partition("]")
        port_ok = not rest or (rest.startswith(":") and rest[1:].isdigit())
        return host if closed and port_ok else None
    if entry.count(":") == 1:  # IPv4 and a port: an IPv6 address has two colons at least
        host, _, port = entry.partition(":")
        return host if port.isdigit() else None
    return entry


def hop_address(hop: str) -> Address:
    """One entry of the header: an address, or `[v6]`, `[v6]:port`, `v4:port` as some
    proxies write them; raises ForwardedForError."""
    entry = hop.strip()
    try:
        return _plain(ipaddress.ip_address(_host(entry) or ""))
    except ValueError:
        raise ForwardedForError(f"{entry!r} is not an IP address") from None


def hops(values: Iterable[str]) -> list[str]:
    """The entries of every `x-forwarded-for` value, in order (several headers read as one
    list, as HTTP joins repeated headers)."""
    return [hop for value in values for hop in value.split(",")]


def client_address(peer: str, forwarded_for: Sequence[str], trusted: TrustedProxies) -> str:
    """The address to limit a request as: `peer` (the connection's address), or, when it is a
    trusted proxy that sent `forwarded_for` (the header's values), the right-most address of
    the header it does not trust. Raises ForwardedForError when an entry read is malformed."""
    if not forwarded_for or not trusted.trusts(peer):
        return peer
    entries = hops(forwarded_for)
    for hop in reversed(entries):
        client = hop_address(hop)
        if not trusted.contains(client):
            return str(client)
    return str(hop_address(entries[0]))  # every entry a trusted proxy: the first of them
