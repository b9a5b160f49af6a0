"""MisbehaviorApi (XIP-49 3.2.8): clients submit reports, anyone queries what this node hosts.

Submitted reports are stored signed by this node, like its own. Queries return reports
stored after `after_ns`, oldest first, at most 1000 per call: page with the last
`server_time_ns` received (it grows strictly, so nothing is skipped)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import structlog

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import wire
from xnode.core.chain_evidence import ChainFacts, transactions_named
from xnode.core.cursors import MAX_SEQUENCE_ID
from xnode.core.errors import Reason, Rejected
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import (
    BLOCKCHAIN_INCONSISTENCY,
    LIVENESS_TYPES,
    PROVEN_TYPES,
    check_client_report,
    type_name,
)
from xnode.core.registry import RegistryKeys
from xnode.core.sizes import Sizes
from xnode.usecases.limits import ApiLimits, Caller
from xnode.usecases.ports import ChainTransactions, MisbehaviorReports

log = structlog.get_logger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]


class MisbehaviorService:
    def __init__(
        self,
        store: MisbehaviorReports,
        keys: Callable[[], RegistryKeys],
        limits: ApiLimits | None = None,
        caller_of: Callable[[Context], Caller] | None = None,
        chain: ChainTransactions | None = None,
        sizes: Sizes | None = None,
    ) -> None:
        """`keys`: the registry keys a client's safety report must prove its claim against;
        `chain`: where BLOCKCHAIN_INCONSISTENCY claims are checked (None: a node without a
        chain refuses them)."""
        self._store = store
        self._sizes = sizes or Sizes()
        self._keys = keys
        self._chain = chain
        self._limits = limits
        self._caller_of = caller_of or (lambda context: Caller.from_peer(context.peer()))

    async def _check(self, report: mb.UnsignedMisbehaviorReport) -> None:
        self._sizes.check_report(report.ByteSize(), int(report.type) in LIVENESS_TYPES)
        check_client_report(report)
        if int(report.type) in PROVEN_TYPES:
            # A report this node signs must prove itself (xnode.core.evidence): hosting
            # unprovable accusations would lend them this node's signature.
            failure = why_unproven(report, self._keys(), await self._chain_facts(report))
            if failure is not None:
                raise Rejected(Reason.MALFORMED, f"the report proves nothing: {failure}")

    async def _chain_facts(self, report: mb.UnsignedMisbehaviorReport) -> ChainFacts | None:
        if int(report.type) != BLOCKCHAIN_INCONSISTENCY:
            return None
        if self._chain is None:
            raise Rejected(
                Reason.NO_CHAIN,
                "this node reads no chain, so it cannot check a BLOCKCHAIN_INCONSISTENCY "
                "claim: submit it to a node that does",
            )
        return await self._chain.facts(transactions_named(report.safety.envelopes))

    async def SubmitMisbehaviorReport(
        self, request: mb.SubmitMisbehaviorReportRequest, context: Context
    ) -> bytes:
        if self._limits is not None:
            await self._limits.report(self._caller_of(context))
        await self._check(request.report)
        await self._store.add(request.report)
        log.info(
            "client_misbehavior_report",
            type=type_name(request.report.type),
            node_id=request.report.misbehaving_node_id,
        )
        return b""

    async def QueryMisbehaviorReports(
        self, request: mb.QueryMisbehaviorReportsRequest, context: Context
    ) -> bytes:
        if self._limits is not None:
            await self._limits.query(self._caller_of(context))
        # Server times are int64 nanoseconds: nothing is stored after a later uint64.
        reports = await self._store.after(
            min(request.after_ns, MAX_SEQUENCE_ID), budget=self._sizes.answer_budget_bytes
        )
        return wire.repeated(1, reports)
