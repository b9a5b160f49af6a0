"""`xnode watchdog`: the XIP's watchdog for client APIs (XIP-49 3.2.7, liveness), run beside
a node or alone.

Every round it probes each enabled registered node's client APIs (health, then a query for
the envelopes past what it already read of that node), files liveness reports with the query
it made (xnode.core.watchdog), compares the envelopes across nodes (forks, an originator's
dependency on its own future), checks every chain payload a node vouched for against the
chain at its transaction (xnode.core.chain_evidence), and asks a node that skipped ids of its
own log for its signed holdings of them (commands.watchdog_withholding). It files only what
proves itself, and, as a node, WITHHOLDING_ACCUSATION after the patience.

Reports are filed as this node (`watchdog_as_node`: into its database, signed with its key,
as its own reports, which count toward the council's liveness threshold) or submitted as a
client to `watchdog_report_copies` other nodes (counted apart by the council). Operators:
docs/watchdog.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import structlog
from grpc_health.v1 import health_pb2

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.chain.receipts import Transactions
from xnode.client.grpc_services import health_check
from xnode.client.node import NodeClient
from xnode.client.reports import Reporter
from xnode.commands.watchdog_withholding import OwnLogs
from xnode.config import Settings
from xnode.core.chain_evidence import ChainFacts, chain_claim, claim_contradicted
from xnode.core.constants import CHAIN_ORIGINATORS
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_to_proto
from xnode.core.errors import Rejected
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import BLOCKCHAIN_INCONSISTENCY, safety_report, type_name
from xnode.core.originator_selection import available_nodes
from xnode.core.registry import NodeEntry, Registry
from xnode.core.watchdog import EnvelopeWitness, Probe, cut_off, liveness_reports, skipped
from xnode.observability.metrics import (
    WATCHDOG_PROBE_SECONDS,
    WATCHDOG_PROBES,
    WATCHDOG_REPORTS,
    WATCHDOG_WITHHELD_ROUNDS,
)
from xnode.store.misbehavior import MisbehaviorStore
from xnode.tls import ClientTls
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)


class ReportSink(Protocol):
    async def file(self, reports: Sequence[mb.UnsignedMisbehaviorReport]) -> None: ...


class AsNode:
    """This node's own reports: signed with its key into its database."""

    def __init__(self, store: MisbehaviorStore) -> None:
        self._store = store

    async def file(self, reports: Sequence[mb.UnsignedMisbehaviorReport]) -> None:
        for report in reports:
            report.submitted_by_node = True
            await self._store.add(report)


class AsClient:
    """A client's reports, each submitted to `copies` nodes other than the accused."""

    def __init__(self, registry: RegistrySource, node: NodeClients, copies: int) -> None:
        self._registry, self._node, self._copies = registry, node, copies

    async def file(self, reports: Sequence[mb.UnsignedMisbehaviorReport]) -> None:
        reporter = Reporter(self._registry.current(), self._node.get, None, copies=self._copies)
        for report in reports:
            report.submitted_by_node = False  # nodes refuse client reports that say otherwise
            reporter.submit(report)
        await reporter.flush()


class NodeClients:
    """One channel per node, kept across rounds."""

    def __init__(self, registry: RegistrySource, tls: ClientTls) -> None:
        self._registry, self._tls = registry, tls
        self._clients: dict[int, tuple[str, NodeClient]] = {}

    def get(self, node_id: int) -> NodeClient:
        address = self._registry.current().nodes[node_id].http_address
        known = self._clients.get(node_id)
        if known is None or known[0] != address:
            self._clients[node_id] = (address, NodeClient(address, self._tls))
        return self._clients[node_id][1]

    async def close(self) -> None:
        for _, client in self._clients.values():
            await client.close()


@dataclass(frozen=True)
class WatchdogConfig:
    timeout_s: float
    slow_s: float
    envelopes_per_round: int

    @classmethod
    def from_settings(cls, settings: Settings) -> WatchdogConfig:
        return cls(
            settings.watchdog_timeout_seconds,
            settings.watchdog_slow_seconds,
            settings.watchdog_envelopes_per_round,
        )


class Watchdog:
    def __init__(
        self,
        registry: RegistrySource,
        clients: NodeClients,
        sink: ReportSink,
        config: WatchdogConfig,
        own_id: int | None = None,
        chain: Transactions | None = None,
        own_logs: OwnLogs | None = None,
    ) -> None:
        """`own_id`: the node the watchdog runs beside (not probed); `chain`: where chain
        payloads are checked (None: they are not); `own_logs`: where the ids a node skipped
        of its own log are looked into (None: they are not)."""
        self._registry, self._clients, self._sink = registry, clients, sink
        self._config, self._own_id, self._chain = config, own_id, chain
        self._own_logs = own_logs
        self._cursors: dict[int, Cursor] = {}
        self._witness = EnvelopeWitness({})
        self._chain_facts: dict[bytes, ChainFacts] = {}

    async def round(self) -> list[mb.UnsignedMisbehaviorReport]:
        """Probes every node once; returns the reports filed."""
        registry = self._registry.current()
        self._witness.keys = registry.keys()
        nodes = [n for n in available_nodes(registry) if n.node_id != self._own_id]
        requests = {n.node_id: self._request(registry, n.node_id) for n in nodes}
        read = {n.node_id: self._cursors.get(n.node_id, Cursor()).get(n.node_id) for n in nodes}
        results = await asyncio.gather(*(self._probe(n, requests[n.node_id]) for n in nodes))
        now = time.time_ns()
        probes = [probe for probe, _ in results]
        reports = liveness_reports(probes, requests, self._config.slow_s, now)
        if cut_off(probes, self._config.slow_s):
            WATCHDOG_WITHHELD_ROUNDS.inc()
            log.warning("watchdog_isolated", failed=[p.node_id for p in probes])
        for node, (_, envelopes) in zip(nodes, results, strict=True):
            for envelope in envelopes:
                reports += await self._safety(node, envelope, now)
            reports += await self._withheld(node, read[node.node_id], envelopes)
        await self._file(reports)
        log.info("watchdog_round", probed=len(probes), reports=len(reports))
        return reports

    def _request(self, registry: Registry, node_id: int) -> api.QueryEnvelopesRequest:
        originators = sorted({*CHAIN_ORIGINATORS, *registry.nodes})
        return api.QueryEnvelopesRequest(
            query=api.EnvelopesQuery(
                originator_node_ids=originators,
                last_seen=cursor_to_proto(self._cursors.get(node_id, Cursor())),
            ),
            limit=self._config.envelopes_per_round,
        )

    async def _probe(
        self, node: NodeEntry, request: api.QueryEnvelopesRequest
    ) -> tuple[Probe, list[bytes]]:
        client = self._clients.get(node.node_id)
        check = health_check(client.channel)
        await self._timed(node.node_id, "health", check(health_pb2.HealthCheckRequest()))
        probe, answer = await self._timed(
            node.node_id, "query", client.replication.QueryEnvelopes(request)
        )
        envelopes = [e.SerializeToString() for e in answer.envelopes] if answer else []
        self._advance(node.node_id, envelopes)
        return probe, envelopes

    async def _timed(
        self, node_id: int, what: str, call: grpc.aio.UnaryUnaryCall[Any, Any]
    ) -> tuple[Probe, Any]:
        """The call's outcome under the timeout, and its answer (None when it failed)."""
        started = time.perf_counter()
        answer = None
        try:
            answer = await asyncio.wait_for(call, self._config.timeout_s)
            status = "OK"
        except TimeoutError:
            call.cancel()
            status = "DEADLINE_EXCEEDED"
        except grpc.aio.AioRpcError as exc:
            status = exc.code().name
        seconds = time.perf_counter() - started
        WATCHDOG_PROBES.labels(str(node_id), what, status).inc()
        WATCHDOG_PROBE_SECONDS.labels(what).observe(seconds)
        if status != "OK":
            log.info("watchdog_probe_failed", node_id=node_id, api=what, status=status)
        return Probe(node_id, status, seconds), answer

    def _advance(self, node_id: int, envelopes: Sequence[bytes]) -> None:
        tops = dict(self._cursors.get(node_id, Cursor()))
        for origin, sequence_id in _positions(envelopes):
            tops[origin] = max(tops.get(origin, 0), sequence_id)
        self._cursors[node_id] = Cursor(tops)

    async def _withheld(
        self, node: NodeEntry, read: int, envelopes: Sequence[bytes]
    ) -> list[mb.UnsignedMisbehaviorReport]:
        """What the ids of its own log the node skipped (`read`: its top read before) prove."""
        if self._own_logs is None:
            return []
        own = [s for origin, s in _positions(envelopes) if origin == node.node_id]
        return await self._own_logs.look(node, skipped(read, own))

    async def _safety(
        self, node: NodeEntry, raw: bytes, now: int
    ) -> list[mb.UnsignedMisbehaviorReport]:
        reports = self._witness.offer(raw, now)
        envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
        if self._chain is None or envelope.WhichOneof("proof") != "blockchain_proof":
            return reports
        try:
            claim = chain_claim(envelope, "served envelope")
        except ValueError:
            return reports
        if claim.signer != node.public_key:
            return reports  # not this node's word: nothing to hold it to
        tx = claim.transaction_hash
        facts = self._chain_facts.get(tx)
        if facts is None:
            try:
                facts = await self._chain.facts([tx])
            except Rejected as exc:
                log.info("watchdog_chain_unavailable", error=exc.detail)
                return reports
            self._chain_facts[tx] = facts
        if claim_contradicted(claim, facts.get(tx)) is None:
            report = safety_report(BLOCKCHAIN_INCONSISTENCY, node.node_id, [raw], now)
            if why_unproven(report, {node.node_id: [node.public_key]}, facts) is None:
                reports.append(report)
        return reports

    async def _file(self, reports: Sequence[mb.UnsignedMisbehaviorReport]) -> None:
        for report in reports:
            kind = type_name(report.type)
            WATCHDOG_REPORTS.labels(kind, str(report.misbehaving_node_id)).inc()
            log.warning("watchdog_report_filed", type=kind, node_id=report.misbehaving_node_id)
        if reports:
            await self._sink.file(reports)


def _positions(envelopes: Sequence[bytes]) -> list[tuple[int, int]]:
    """(originator, sequence id) of each served envelope."""
    out = []
    for raw in envelopes:
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelopes_pb2.OriginatorEnvelope.FromString(raw).unsigned_originator_envelope
        )
        out.append((unsigned.originator_node_id, unsigned.originator_sequence_id))
    return out


async def run_watchdog(
    watchdog: Watchdog, interval_s: float, stop: asyncio.Event, once: bool = False
) -> None:
    while True:
        await watchdog.round()
        if once:
            return
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
            return
        except TimeoutError:
            continue
