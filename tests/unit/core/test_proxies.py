"""The address a request is limited as behind trusted proxies (core.proxies): the right-most
untrusted address of `x-forwarded-for`, read only from a trusted peer."""

from __future__ import annotations

import re

import pytest

from xnode.core.proxies import ForwardedForError, TrustedProxies, client_address, hop_address

TRUSTED = TrustedProxies.parse("10.0.0.0/8, 192.0.2.7, 2001:db8::/32")


@pytest.mark.parametrize(
    ("peer", "header", "limited_as"),
    [
        # From a trusted proxy: the client it names.
        ("10.1.2.3", ["203.0.113.5"], "203.0.113.5"),
        # Several trusted hops (a load balancer, then a gateway): skipped right to left.
        ("192.0.2.7", ["203.0.113.5, 10.9.9.9"], "203.0.113.5"),
        # What the client wrote itself, left of the address the proxy saw, is never used.
        ("10.1.2.3", ["1.1.1.1, 203.0.113.5"], "203.0.113.5"),
        ("10.1.2.3", ["10.0.0.1, 203.0.113.5"], "203.0.113.5"),
        # Repeated headers read as one list, in order.
        ("10.1.2.3", ["1.1.1.1", "203.0.113.5, 10.2.2.2"], "203.0.113.5"),
        # Every entry trusted: the first (a proxy calling for itself).
        ("10.1.2.3", ["10.4.4.4, 10.5.5.5"], "10.4.4.4"),
        # IPv6, bracketed, with ports, and an IPv4 client of a dual-stack socket.
        ("2001:db8::1", ["2001:DB8:0::9"], "2001:db8::9"),
        ("10.1.2.3", ["[2600::1]:443"], "2600::1"),
        ("10.1.2.3", ["203.0.113.5:5555"], "203.0.113.5"),
        ("::ffff:10.1.2.3", ["::ffff:203.0.113.5"], "203.0.113.5"),
        # From anyone else the header is ignored: no one picks the address they are limited as.
        ("198.51.100.1", ["203.0.113.5"], "198.51.100.1"),
        ("unix:/run/xnode.sock", ["203.0.113.5"], "unix:/run/xnode.sock"),
        # No header: the proxy itself.
        ("10.1.2.3", [], "10.1.2.3"),
        # Junk left of the client is the client's own, never read.
        ("10.1.2.3", ["not-an-ip, 203.0.113.5"], "203.0.113.5"),
    ],
)
def test_the_right_most_untrusted_address_from_a_trusted_peer(
    peer: str, header: list[str], limited_as: str
) -> None:
    assert client_address(peer, header, TRUSTED) == limited_as


def test_nobody_is_trusted_by_default() -> None:
    assert client_address("127.0.0.1", ["203.0.113.5"], TrustedProxies()) == "127.0.0.1"
    assert not TrustedProxies.parse(" , ")


@pytest.mark.parametrize(
    "header", [["unknown"], ["203.0.113.5, "], [""], ["10.2.2.2, junk"], ["300.1.1.1"]]
)
def test_a_trusted_proxys_malformed_entry_is_an_error(header: list[str]) -> None:
    with pytest.raises(ForwardedForError, match="is not an IP address"):
        client_address("10.1.2.3", header, TRUSTED)


def test_hops_are_read_as_addresses() -> None:
    assert str(hop_address(" 203.0.113.5 ")) == "203.0.113.5"
    assert str(hop_address("[::1]")) == "::1"
    for bad in ("1.2.3.4:x", "[::1]x", "[::1]:", "[::1"):
        with pytest.raises(ForwardedForError, match="is not an IP address"):
            hop_address(bad)


@pytest.mark.parametrize("bad", ["10.0.0.1/8", "example.com", "10.0.0.0/33"])
def test_a_setting_that_is_not_networks_is_refused_naming_the_entry(bad: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"'{bad}' is not an address or a CIDR network")):
        TrustedProxies.parse(f"192.0.2.1, {bad}")
