"""Misbehavior reports from the client (XIP-49 3.2.7, 3.2.8, 3.3.4): what a client saw a node
do wrong, submitted to other nodes so that the accused cannot hide it.

- Safety: an envelope the node signed that breaks the payer-envelope rule (INVALID_PAYLOAD).
  It is sent only when it proves itself to anyone holding the registry keys
  (`core.evidence.why_unproven`): nodes refuse client reports that prove nothing, and an
  envelope whose signature is not the node's proves nothing against it.
- Liveness: no answer in time (UNRESPONSIVE_NODE, with the time waited) or UNAVAILABLE
  (FAILED_REQUEST), at most one per node and type every `liveness_interval_s`, so a node that
  is down for a minute is not reported once per retry.
Each report goes to `copies` other enabled nodes ("Clients should submit misbehavior reports
to multiple nodes to protect against omission", 3.2.8), in the background: reporting never
delays or fails the call that found the problem."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import (
    FAILED_REQUEST,
    INVALID_PAYLOAD,
    MAX_RESPONSE_TIME_NS,
    UNRESPONSIVE_NODE,
)
from xnode.core.originator_selection import available_nodes
from xnode.core.registry import Registry

log = logging.getLogger(__name__)

SUBMIT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class SentReport:
    """A report one node took: whom it accuses, of what, and which node holds it."""

    misbehaving_node_id: int
    type: int
    to_node_id: int


class Reporter:
    def __init__(
        self,
        registry: Registry,
        node: Callable[[int], NodeClient],
        keys: Mapping[int, bytes] | None,
        clock_ns: Callable[[], int] = time.time_ns,
        copies: int = 2,
        liveness_interval_s: float = 10.0,
    ) -> None:
        """`keys` None: the registry's keys are unknown, so no safety report can be proven."""
        self._registry = registry
        self._node = node
        self._keys = {n: [k] for n, k in keys.items()} if keys is not None else None
        self._clock_ns = clock_ns
        self._copies = copies
        self._interval_s = liveness_interval_s
        self._last_liveness: dict[tuple[int, int], float] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self.sent: list[SentReport] = []

    def invalid_payload(self, node_id: int, envelope: bytes) -> None:
        """`envelope`: the serialized OriginatorEnvelope that failed a check of 3.3.4."""
        if self._keys is None:
            return
        try:
            signed = envelopes_pb2.OriginatorEnvelope.FromString(envelope)
        except DecodeError:  # undecodable bytes prove nothing
            return
        report = mb.UnsignedMisbehaviorReport(
            reporter_time_ns=self._clock_ns(),
            misbehaving_node_id=node_id,
            type=INVALID_PAYLOAD,
            safety=mb.SafetyFailure(envelopes=[signed]),
        )
        if why_unproven(report, self._keys) is None:
            self.submit(report)

    def liveness(self, node_id: int, code: grpc.StatusCode, waited_s: float) -> None:
        """After a call to `node_id` failed with `code` following `waited_s`."""
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            kind = UNRESPONSIVE_NODE
        elif code is grpc.StatusCode.UNAVAILABLE:
            kind = FAILED_REQUEST
        else:  # ABORTED (not yet replicated), limits, cancellations: no misbehavior
            return
        now = time.monotonic()
        if now - self._last_liveness.get((node_id, kind), -self._interval_s) < self._interval_s:
            return
        self._last_liveness[(node_id, kind)] = now
        self.submit(
            mb.UnsignedMisbehaviorReport(
                reporter_time_ns=self._clock_ns(),
                misbehaving_node_id=node_id,
                type=kind,
                liveness=mb.LivenessFailure(
                    response_time_ns=min(int(waited_s * 1e9), MAX_RESPONSE_TIME_NS)
                ),
            )
        )

    def submit(self, report: mb.UnsignedMisbehaviorReport) -> None:
        """Sends `report` to `copies` enabled nodes other than the accused, in the background."""
        accused = report.misbehaving_node_id
        others = [n.node_id for n in available_nodes(self._registry) if n.node_id != accused]
        for to in others[: self._copies]:
            task = asyncio.get_running_loop().create_task(self._send(report, to))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _send(self, report: mb.UnsignedMisbehaviorReport, to: int) -> None:
        try:
            await self._node(to).submit_misbehavior_report(report, SUBMIT_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            # Not the caller's failure: the report had other copies (info, not a warning).
            log.info(
                "misbehavior report against node %d not taken by node %d: %s %s",
                report.misbehaving_node_id,
                to,
                exc.code().name,
                exc.details(),
            )
            return
        self.sent.append(SentReport(report.misbehaving_node_id, int(report.type), to))

    async def flush(self, timeout_s: float = SUBMIT_TIMEOUT_S) -> None:
        """Waits for the reports under way (the client closes its channels after this)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout_s)
