"""Who a request's node token makes its caller (api.auth): any token a stranger makes is a
refusal, never an error; cached tokens expire an hour after their iat at the latest and lose
their peer limits as soon as the registry disables their node; read-only tokens buy no
buckets of their own."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.replication.test_auth import KEYS
from tests.unit.replication.test_auth import signed_token as signed
from tests.unit.replication.test_own_health import Clock
from xnode.api.auth import NodeAuthInterceptor
from xnode.api.http import HttpContext
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.node_tokens import AuthError, issue_token, verify_token
from xnode.core.registry import NodeEntry, Registry
from xnode.usecases.limits import Caller

NOW = 1_800_000_000
SELF = 200
PEER = KEYS[100]  # the key signed() signs with
READER = SigningKey.generate()
ENABLED = Registry([NodeEntry(100, PEER.public_key, "http://a")])
DISABLED = Registry([NodeEntry(100, PEER.public_key, "http://a", enabled=False)])


def _interceptor(registry: list[Registry], clock: Clock) -> NodeAuthInterceptor:
    return NodeAuthInterceptor(SELF, lambda: registry[0], Cursor, clock=clock)


def _caller(interceptor: NodeAuthInterceptor, token: str, ip: str = "10.0.0.9") -> Caller:
    context: Any = HttpContext((("node-authorization", token),), ip)  # the HTTP port's context
    return interceptor.caller(context)


def test_a_superscript_digit_subject_is_refused_not_an_error() -> None:
    token = signed({"sub": "²", "aud": [str(SELF)], "iat": NOW, "exp": NOW + 60})
    try:
        verify_token(token, ENABLED, SELF, NOW)
    except AuthError as exc:
        assert "node id" in str(exc)
    else:
        raise AssertionError("a subject of '²' was accepted")
    assert _caller(_interceptor([ENABLED], Clock(NOW)), token) == Caller("10.0.0.9")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=120, deadline=None)
@given(
    sub=_JSON | st.from_regex(r"[0-9\u00b2\u00b3\u00b9\u0663\u0966]{1,5000}", fullmatch=True),
    aud=_JSON,
    iat=_JSON | st.integers(NOW - 7200, NOW + 7200),
    exp=_JSON | st.integers(NOW - 7200, 2**70),
)
def test_any_claims_a_stranger_signs_are_refused_or_accepted_never_an_error(
    sub: object, aud: object, iat: object, exp: object
) -> None:
    token = signed({"sub": sub, "aud": aud, "iat": iat, "exp": exp})
    try:
        identity = verify_token(token, ENABLED, SELF, NOW, read_only=True)
    except AuthError:
        return
    assert identity.node_id == 100  # only the registered peer's own key passes
    assert identity.expires_at <= int(iat) + 3600  # type: ignore[call-overload]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300))
def test_any_token_bytes_are_a_client_caller(token: bytes | str) -> None:
    text = token.decode("latin-1") if isinstance(token, bytes) else token
    interceptor = _interceptor([ENABLED], Clock(NOW))
    assert _caller(interceptor, text) == Caller("10.0.0.9")


def test_a_ten_year_token_is_trusted_for_an_hour_after_its_iat() -> None:
    clock = Clock(NOW)
    token = signed({"sub": "100", "aud": [str(SELF)], "iat": NOW, "exp": NOW + 10 * 365 * 86400})
    interceptor = _interceptor([ENABLED], clock)
    assert _caller(interceptor, token) == Caller("10.0.0.9", 100)
    clock.t = NOW + 3599
    assert _caller(interceptor, token) == Caller("10.0.0.9", 100)  # from the cache
    clock.t = NOW + 3600
    assert _caller(interceptor, token) == Caller("10.0.0.9")


def test_a_cached_token_loses_its_peer_limits_once_its_node_is_disabled() -> None:
    registry = [ENABLED]
    interceptor = _interceptor(registry, Clock(NOW))
    token = issue_token(PEER, 100, SELF, NOW)
    assert _caller(interceptor, token) == Caller("10.0.0.9", 100)
    registry[0] = DISABLED
    assert _caller(interceptor, token) == Caller("10.0.0.9")


def test_a_read_only_token_is_limited_as_its_client_ip_in_the_same_buckets() -> None:
    interceptor = _interceptor([ENABLED], Clock(NOW))
    token = issue_token(READER, None, SELF, NOW)
    assert verify_token(token, ENABLED, SELF, NOW, read_only=True).read_only
    with_token, without = _caller(interceptor, token), Caller("10.0.0.9")
    assert with_token == without
    assert with_token.subject == "ip:10.0.0.9"
