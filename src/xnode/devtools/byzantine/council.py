"""What a run ends with: the council's Spark job over every node's export, and a check of
its flags made from the exports' reports and the chain alone (the NodeRegistry's keys), as
anyone holding them could make it on any later day."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.chain_evidence import ChainFacts
from xnode.core.crypto import SignatureError, misbehavior_digest, recover_public_key
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import JUDGED_TYPES, PROVEN_TYPES
from xnode.core.registry import RegistryKeys
from xnode.core.registry_history import RegistryHistory, reporters_needed

# The council's job over these exports, writing its outputs under the second path: each
# flagged node and the bases of its flags ("safety_proof", "liveness_threshold"). The job
# lives outside the daemon (spark_jobs), so the caller passes it in.
Council = Callable[[list[Path], Path], Mapping[int, set[str]]]
# The outcome on the chain of the transactions BLOCKCHAIN_INCONSISTENCY reports name.
ChainLookup = Callable[[list[bytes]], ChainFacts]


def named_transactions(report: mb.UnsignedMisbehaviorReport) -> list[bytes]:
    return [
        e.blockchain_proof.transaction_hash
        for e in report.safety.envelopes
        if e.WhichOneof("proof") == "blockchain_proof"
    ]


@dataclass(frozen=True)
class Exported:
    """Every node's exported reports, signed, and the NodeRegistry's keys (from the chain,
    never from an export)."""

    reports: list[mb.MisbehaviorReport]
    keys: RegistryKeys
    enabled: int  # nodes the registry holds enabled now

    @classmethod
    def read(cls, exports: Iterable[Path], registry: RegistryHistory) -> Exported:
        reports: dict[bytes, mb.MisbehaviorReport] = {}
        for directory in exports:
            for path in sorted((directory / "misbehavior_reports").rglob("*.parquet")):
                for raw in pq.read_table(path, columns=["report"]).column("report").to_pylist():
                    reports[bytes(raw)] = mb.MisbehaviorReport.FromString(bytes(raw))
        now = registry.block_time_s * 10**9
        enabled = len(registry.enabled_during(now, now + 1))
        return cls(list(reports.values()), registry.keys(), enabled)

    def unsigned(self, report: mb.MisbehaviorReport) -> mb.UnsignedMisbehaviorReport:
        return mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report)

    def safety_reports(self) -> int:
        return sum(1 for r in self.reports if self.unsigned(r).type in PROVEN_TYPES)

    def host(self, report: mb.MisbehaviorReport) -> int | None:
        """The registered node whose key signed the report, if any."""
        try:
            digest = misbehavior_digest(report.unsigned_misbehavior_report)
            signer = recover_public_key(report.signature.bytes, digest)
        except SignatureError:
            return None
        return next((n for n, keys in self.keys.items() if signer in keys), None)

    def proves(self, node_id: int, chain: ChainLookup | None = None) -> bool:
        """A signed safety or WITHHOLDING report whose evidence proves its claim against
        `node_id` (chain payloads against `chain`), or liveness reports (and withholding
        accusations, judged alike) filed as their own by more than the judged share of the
        other enabled nodes (at least two)."""
        reporters: set[int] = set()
        for report in self.reports:
            unsigned, host = self.unsigned(report), self.host(report)
            if unsigned.misbehaving_node_id != node_id or host is None or host == node_id:
                continue
            if unsigned.type in PROVEN_TYPES:
                txs = named_transactions(unsigned)
                facts = chain(txs) if chain is not None and txs else None
                if why_unproven(unsigned, self.keys, facts) is None:
                    return True
            if unsigned.type in JUDGED_TYPES and unsigned.submitted_by_node:
                reporters.add(host)
        return len(reporters) >= reporters_needed(self.enabled - 1)
