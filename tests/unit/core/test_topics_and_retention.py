from __future__ import annotations

import pytest

from xnode.core.retention import DEFAULT_RETENTION_DAYS, NEVER, expiry_unixtime, is_expired
from xnode.core.topics import MAX_TOPIC_LENGTH, Topic, TopicError, TopicKind


def test_topic_round_trip() -> None:
    topic = Topic.parse(b"\x02" + b"\xab" * 32)
    assert topic.kind is TopicKind.IDENTITY_UPDATES
    assert topic.raw == b"\x02" + b"\xab" * 32


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty"),
        (b"\x00", "no identifier"),
        (b"\x09abc", "unknown topic kind"),
        (b"\x00" + b"x" * MAX_TOPIC_LENGTH, "limit is 128"),
    ],
)
def test_bad_topics(raw: bytes, message: str) -> None:
    with pytest.raises(TopicError, match=message):
        Topic.parse(raw)


def test_identity_updates_never_expire() -> None:
    assert expiry_unixtime(TopicKind.IDENTITY_UPDATES, 5, 10**18) == NEVER
    assert not is_expired(NEVER, 2**40)


def test_retention_default_and_explicit() -> None:
    ns = 1_700_000_000 * 10**9
    assert expiry_unixtime(TopicKind.GROUP_MESSAGES, 0, ns) == (
        1_700_000_000 + DEFAULT_RETENTION_DAYS * 86400
    )
    assert expiry_unixtime(TopicKind.WELCOME_MESSAGES, 2, ns) == 1_700_000_000 + 2 * 86400
    assert is_expired(1_700_000_000, 1_700_000_000)
    assert not is_expired(1_700_000_001, 1_700_000_000)
