"""The client address of a call (api.proxies), read from the HTTP port's context as from a
gRPC one: a trusted proxy's `x-forwarded-for`, and its malformed header logged once."""

from __future__ import annotations

from structlog.testing import capture_logs

from xnode.api.http import HttpContext
from xnode.api.proxies import ClientAddresses, forwarded_for
from xnode.core.proxies import TrustedProxies

PROXY = "10.1.2.3"


def call(remote: str, *header: str) -> HttpContext:
    return HttpContext(tuple(("x-forwarded-for", h) for h in header), remote)


def test_a_trusted_proxy_names_its_client_and_no_one_else_can() -> None:
    addresses = ClientAddresses(TrustedProxies.parse("10.0.0.0/8"))
    assert addresses.of(call(PROXY, "203.0.113.5")) == "203.0.113.5"
    assert addresses.of(call("198.51.100.1", "203.0.113.5")) == "198.51.100.1"
    assert addresses.of(call("2001:db8::1", "203.0.113.5")) == "2001:db8::1"
    assert ClientAddresses().of(call(PROXY, "203.0.113.5")) == PROXY


def test_a_malformed_header_is_the_proxys_own_and_is_logged_once_per_proxy() -> None:
    addresses = ClientAddresses(TrustedProxies.parse("10.0.0.0/8"))
    with capture_logs() as logged:
        for _ in range(3):
            assert addresses.of(call(PROXY, "unknown")) == PROXY
        assert addresses.of(call("10.9.9.9", "203.0.113.5, junk")) == "10.9.9.9"
    warnings = [e for e in logged if e["event"] == "forwarded_for_malformed"]
    assert [(e["proxy"], e["header"]) for e in warnings] == [
        (PROXY, "unknown"),
        ("10.9.9.9", "203.0.113.5, junk"),
    ]


def test_only_an_ip_address_is_forwarded() -> None:
    assert forwarded_for("203.0.113.5") == (("x-forwarded-for", "203.0.113.5"),)
    assert forwarded_for("::1") == (("x-forwarded-for", "::1"),)
    assert forwarded_for("unix:/run/xnode.sock") == ()
    assert forwarded_for("unknown") == ()
