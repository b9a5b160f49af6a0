"""What the gateway checks before it passes a node's answer on (XIP-49 3.3.4, the checks of
xnode.core.client_checks): every envelope is signed by its originator's registry key (chain
payloads by a registry node), its authenticated data names that originator and a topic that
was asked for, its timestamp is not in the future, and sequence ids rise per originator past
the cursor the client gave. A node whose answer fails is not passed on: another answers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import wire
from xnode.core.client_checks import (
    AadMismatch,
    EnvelopeCheckFailed,
    MalformedEnvelope,
    OriginatorOrder,
    check_received,
    check_timestamp,
)
from xnode.core.cursors import Cursor


class AnswerChecks:
    """The checks of one read: the registry's keys as they are now (a stream outlives
    registry changes), what was asked, and per originator what was passed on so far (a
    resumed stream continues from there)."""

    def __init__(
        self,
        keys: Callable[[], Mapping[int, bytes]],
        query: api.EnvelopesQuery,
        start: Cursor,
        clock_ns: Callable[[], int],
    ) -> None:
        self._keys = keys
        self._topics = list(query.topics)
        self._originators = set(query.originator_node_ids)
        self.order = OriginatorOrder(start)
        self._clock_ns = clock_ns

    @property
    def cursor(self) -> Cursor:
        return self.order.cursor

    def envelope(self, raw: bytes) -> None:
        """Raises EnvelopeCheckFailed; accepted, it moves the cursor."""
        env = check_received(raw, self._keys(), self._topics)
        if self._originators and env.originator_node_id not in self._originators:
            raise AadMismatch(
                f"originator {env.originator_node_id} was not asked for",
                env.originator_node_id,
                env.sequence_id,
            )
        check_timestamp(env, self._clock_ns(), published=False)
        self.order.accept(env)

    def envelopes(self, raws: Sequence[bytes]) -> tuple[list[bytes], EnvelopeCheckFailed | None]:
        """The envelopes accepted before the first that fails, and that failure."""
        accepted: list[bytes] = []
        for raw in raws:
            try:
                self.envelope(raw)
            except EnvelopeCheckFailed as exc:
                return accepted, exc
            accepted.append(raw)
        return accepted, None


def envelopes_of(response: bytes) -> list[bytes]:
    """Field 1 of QueryEnvelopesResponse and SubscribeEnvelopesResponse: the envelopes."""
    try:
        return wire.length_delimited(response, 1)
    except wire.FrameError as exc:
        raise MalformedEnvelope(f"the answer does not decode: {exc}") from None


def check_newest(keys: Mapping[int, bytes], topics: Sequence[bytes], response: bytes) -> None:
    """GetNewestEnvelope: one result per topic asked, in order, each envelope (when there is
    one) on its own topic and signed."""
    try:
        results = wire.length_delimited(response, 1)
        envelopes = [wire.length_delimited(r, 1) for r in results]
    except wire.FrameError as exc:
        raise MalformedEnvelope(f"the answer does not decode: {exc}") from None
    if len(results) != len(topics):
        raise MalformedEnvelope(f"{len(results)} results for {len(topics)} topics")
    for topic, found in zip(topics, envelopes, strict=True):
        for raw in found[-1:]:
            check_received(raw, keys, [topic])
