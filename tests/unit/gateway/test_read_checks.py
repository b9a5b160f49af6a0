"""What the gateway checks before it passes a node's read answer on (gateway/read_checks.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from tests.unit.core.test_client_checks import KEYS, NODE, TOPIC, originated
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import wire
from xnode.core.client_checks import (
    AadMismatch,
    BadOriginatorSignature,
    MalformedEnvelope,
    OutOfOrder,
    UnknownOriginator,
)
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.gateway.read_checks import AnswerChecks, check_newest, envelopes_of


def checks(
    start: Cursor | None = None,
    originators: list[int] | None = None,
    keys: Mapping[int, bytes] = KEYS,
) -> AnswerChecks:
    query = api.EnvelopesQuery(topics=[TOPIC], originator_node_ids=originators or [])
    return AnswerChecks(lambda: keys, query, start or Cursor(), time.time_ns)


def test_accepted_envelopes_move_the_cursor_a_resumed_stream_starts_from() -> None:
    answer = checks()
    accepted, failed = answer.envelopes([originated(1), originated(2)])
    assert failed is None and len(accepted) == 2
    assert answer.cursor == Cursor({NODE: 2})


def test_the_envelopes_before_the_first_failure_are_kept_and_the_failure_named() -> None:
    first, forged = originated(1), originated(2, key=SigningKey.generate())
    accepted, failed = checks().envelopes([first, forged, originated(3)])
    assert accepted == [first]
    assert isinstance(failed, BadOriginatorSignature)


def test_what_the_client_has_seen_is_a_duplicate() -> None:
    with pytest.raises(OutOfOrder):
        checks(Cursor({NODE: 5})).envelope(originated(5))


def test_an_originator_not_asked_for_is_refused() -> None:
    with pytest.raises(AadMismatch, match="was not asked for"):
        checks(originators=[200]).envelope(originated(1))


def test_the_registry_is_read_at_each_envelope() -> None:
    registry: dict[int, bytes] = {}
    answer = checks(keys=registry)
    with pytest.raises(UnknownOriginator):
        answer.envelope(originated(1))
    registry.update(KEYS)  # the node registered since the stream opened
    answer.envelope(originated(1))


def test_bytes_that_are_no_response_are_malformed() -> None:
    with pytest.raises(MalformedEnvelope):
        envelopes_of(b"\x0a\xff")


def test_newest_answers_one_result_per_topic_on_its_topic() -> None:
    def results(*raws: bytes) -> bytes:
        return wire.repeated(1, (wire.field(1, r) if r else b"" for r in raws))

    check_newest(KEYS, [TOPIC, TOPIC], results(originated(1), b""))
    with pytest.raises(MalformedEnvelope, match="1 results for 2 topics"):
        check_newest(KEYS, [TOPIC, TOPIC], results(originated(1)))
    with pytest.raises(AadMismatch):
        check_newest(KEYS, [b"\x00" + bytes(16)], results(originated(1)))
    with pytest.raises(BadOriginatorSignature):
        check_newest(KEYS, [TOPIC], results(originated(1, key=SigningKey.generate())))
