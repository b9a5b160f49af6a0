"""Expiry from retention (XIP-49 3.2.4): identity updates never expire."""

from __future__ import annotations

from xnode.core.constants import NS_PER_SECOND, SECONDS_PER_DAY
from xnode.core.topics import TopicKind

DEFAULT_RETENTION_DAYS = 183  # "6 months", rounded up so no payload leaves early
DEFAULT_RETENTION_SECONDS = DEFAULT_RETENTION_DAYS * SECONDS_PER_DAY
NEVER = 0


def expiry_unixtime(kind: TopicKind, retention_days: int, originator_ns: int) -> int:
    """Unix seconds after which the payload may be dropped, or NEVER (0)."""
    if kind is TopicKind.IDENTITY_UPDATES:
        return NEVER
    days = retention_days or DEFAULT_RETENTION_DAYS
    return originator_ns // NS_PER_SECOND + days * SECONDS_PER_DAY


def is_expired(expiry: int, now_unix: int) -> bool:
    return expiry != NEVER and expiry <= now_unix
