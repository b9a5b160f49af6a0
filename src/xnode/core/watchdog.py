"""What the watchdog (XIP-49 3.2.7, liveness via client APIs) concludes from what it saw.
Pure: probe outcomes and served envelopes in, reports out.

Liveness: a probe unanswered within the timeout T is UNRESPONSIVE_NODE, an error status is
FAILED_REQUEST, an answer slower than t is SLOW_NODE. Statuses that say the watchdog's own
request was refused (limits, bad arguments, authentication) or that the call was cancelled
are no misbehavior. A round in which every probed node failed says more about the watchdog's
own network than about the nodes: its liveness reports are withheld.

Safety: envelopes are remembered per (originator, sequence id); another node serving other
signed content for one of them is a fork (DUPLICATE_SEQUENCE_ID), and an envelope whose
originator depends on its own later sequence id is CAUSAL_ORDERING. Only what
xnode.core.evidence says proves itself is filed. Who files them sets `submitted_by_node`."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.constants import CHAIN_ORIGINATORS
from xnode.core.evidence import own_dependency_ahead, why_unproven
from xnode.core.misbehavior import (
    CAUSAL_ORDERING,
    DUPLICATE_SEQUENCE_ID,
    FAILED_REQUEST,
    MAX_RESPONSE_TIME_NS,
    SLOW_NODE,
    UNRESPONSIVE_NODE,
    safety_report,
)
from xnode.core.registry import RegistryKeys
from xnode.core.withholding import MAX_HOLDINGS_SPAN

NS_PER_S = 1_000_000_000
# gRPC status names that are the node's failure to serve (the XIP's "error code").
FAILURE_STATUSES = frozenset({"UNAVAILABLE", "INTERNAL", "UNKNOWN", "DATA_LOSS", "UNIMPLEMENTED"})
TIMED_OUT = "DEADLINE_EXCEEDED"


@dataclass(frozen=True, slots=True)
class Probe:
    """One call to a node: its status name (OK when answered) and the time it took."""

    node_id: int
    status: str
    seconds: float


def liveness_kind(probe: Probe, slow_s: float) -> int | None:
    """The liveness failure a probe shows, or None."""
    if probe.status == TIMED_OUT:
        return UNRESPONSIVE_NODE
    if probe.status in FAILURE_STATUSES:
        return FAILED_REQUEST
    if probe.status == "OK" and probe.seconds > slow_s:
        return SLOW_NODE
    return None


def cut_off(probes: Sequence[Probe], slow_s: float) -> bool:
    """Whether every probe of two or more nodes went unanswered or failed."""
    failed = [p for p in probes if liveness_kind(p, slow_s) in (UNRESPONSIVE_NODE, FAILED_REQUEST)]
    return len(probes) >= 2 and len(failed) == len(probes)


def liveness_reports(
    probes: Sequence[Probe],
    requests: dict[int, api.QueryEnvelopesRequest],
    slow_s: float,
    now_ns: int,
) -> list[mb.UnsignedMisbehaviorReport]:
    """The round's liveness reports, each with the query it made; none when every probe of
    two or more nodes failed (the watchdog is the likelier one cut off)."""
    if cut_off(probes, slow_s):
        return []
    failed = {p.node_id: kind for p in probes if (kind := liveness_kind(p, slow_s)) is not None}
    return [
        mb.UnsignedMisbehaviorReport(
            reporter_time_ns=now_ns,
            misbehaving_node_id=p.node_id,
            type=mb.Misbehavior.ValueType(failed[p.node_id]),
            liveness=mb.LivenessFailure(
                response_time_ns=min(int(p.seconds * NS_PER_S), MAX_RESPONSE_TIME_NS),
                query=requests[p.node_id],
            ),
        )
        for p in probes
        if p.node_id in failed
    ]


class EnvelopeWitness:
    """Envelopes seen across nodes, keyed by (originator, sequence id): the first signed
    version of each, up to `capacity` (the oldest forgotten first)."""

    def __init__(self, keys: RegistryKeys, capacity: int = 100_000) -> None:
        self.keys = keys  # the registry's, refreshed by the caller
        self._capacity = capacity
        self._seen: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._forked: set[tuple[int, int]] = set()

    def offer(self, raw: bytes, now_ns: int) -> list[mb.UnsignedMisbehaviorReport]:
        """Safety reports this served envelope proves (each once), against its originator.
        Chain payloads are the chain's to judge (xnode.core.chain_evidence)."""
        try:
            envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
            unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
                envelope.unsigned_originator_envelope
            )
        except DecodeError:
            return []
        origin = unsigned.originator_node_id
        if origin in CHAIN_ORIGINATORS:
            return []
        key = (origin, unsigned.originator_sequence_id)
        first = self._seen.get(key)
        claims: list[tuple[int, list[bytes]]] = []
        if first is None:
            self._remember(key, raw)
            # Parsed first, the signature recovered only for a likely proof.
            if own_dependency_ahead(key[1], unsigned.payer_envelope_bytes, origin) is not None:
                claims.append((CAUSAL_ORDERING, [raw]))
        elif first != raw and key not in self._forked:
            claims.append((DUPLICATE_SEQUENCE_ID, [first, raw]))
        reports = [safety_report(kind, origin, envelopes, now_ns) for kind, envelopes in claims]
        reports = [r for r in reports if why_unproven(r, self.keys) is None]
        if any(r.type == DUPLICATE_SEQUENCE_ID for r in reports):
            self._forked.add(key)
        return reports

    def _remember(self, key: tuple[int, int], raw: bytes) -> None:
        self._seen[key] = raw
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)


def skipped(after: int, served: Sequence[int]) -> list[int]:
    """The sequence ids of a node's own log that its answer skipped (at most
    MAX_HOLDINGS_SPAN): those past `after`, the top read of it before, and below the highest
    it served now. Its own log is whole on it unless expired, lost or withheld, which only
    its signed holdings tell apart. Before anything was read of it (`after` 0), the ids
    below the first served are not counted: a log's oldest envelopes expire first."""
    if not served:
        return []
    held = set(served)
    first = after + 1 if after else min(served) + 1
    gaps = (s for s in range(first, max(served)) if s not in held)
    return list(itertools.islice(gaps, MAX_HOLDINGS_SPAN))
