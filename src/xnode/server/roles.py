"""Which of a node's serving processes this one is (xnode.workers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerRole:
    """Which of the node's serving processes this is (xnode.workers). The first (index 0)
    runs what runs once per node: the recovery of its own log, replication (with liveness
    reports and anti-entropy) and checkpoint issuing; the chain indexer is one per database
    by its own lock. With more than one, the ports are shared (SO_REUSEPORT) and each
    process's metrics are served plainly on loopback for the supervisor to merge. The first
    also sequences every worker's publishes: the others hand it their validated batches over
    the Unix socket `sequencer_link` (xnode.runtime.forwarding)."""

    index: int = 0
    count: int = 1
    sequencer_link: str = ""

    @property
    def primary(self) -> bool:
        return self.index == 0

    @property
    def shares_ports(self) -> bool:
        return self.count > 1


SOLE = WorkerRole()
