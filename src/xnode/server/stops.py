"""The stop order of a node and of a gateway, as one list.

Each part registers its stop step under the phase it belongs to as it starts; `Stops.run`
runs the phases in STOP_ORDER (within a phase, the last registered first), each step under
the deadline of `StopSteps`. A start-up that fails midway runs the same list over what had
started, so nothing is left behind."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from xnode.usecases.concurrency import StopSteps


class Phase(enum.Enum):
    HEALTH = "health"
    ACCEPTING = "accepting"
    LISTENERS = "listeners"
    READS = "reads"
    COMMITS = "commits"
    PEERS = "peers"
    REGISTRY = "registry"
    CHAIN = "chain"
    MAINTENANCE = "maintenance"
    DATABASE = "database"
    CHAIN_CONNECTION = "chain connection"
    SIGNER = "signer"


STOP_ORDER: tuple[Phase, ...] = (
    # Every service NOT_SERVING first, so balancers move callers away before anything drains;
    # and peers are no longer judged, as they may be stopping with this node.
    Phase.HEALTH,
    # Publishes refused and subscriptions ended with UNAVAILABLE; accepted publishes answered.
    Phase.ACCEPTING,
    # The HTTP port, then the gRPC server (within what is left of the grace), then metrics.
    Phase.LISTENERS,
    # The read replica's watch and pool: nothing reads through them any more.
    Phase.READS,
    # Other workers' commit notices, the forwarding link, checkpoints, the group commit's last
    # batches: what was accepted is committed before replication and the pool go.
    Phase.COMMITS,
    # Replication's streams, repair and peer channels (a gateway's node channels).
    Phase.PEERS,
    Phase.REGISTRY,
    # The chain indexer and publisher, which write through the pool.
    Phase.CHAIN,
    # Retention's partition upkeep, which also writes through the pool.
    Phase.MAINTENANCE,
    # The pool, once every user of it has stopped, then the primary's watch.
    Phase.DATABASE,
    Phase.CHAIN_CONNECTION,
    # The signing process signs until the last commit.
    Phase.SIGNER,
)


# Pushes one step onto the exit stack that runs them.
_Push = Callable[[StopSteps], object]


@dataclass
class Stops:
    """The stop steps of what has started, by phase; `deadline_s` bounds each step."""

    deadline_s: float
    _steps: dict[Phase, list[_Push]] = field(default_factory=dict)

    def add(
        self,
        phase: Phase,
        step: Callable[[], Awaitable[object]],
        name: str | None = None,
        force: Callable[[], object] | None = None,
    ) -> None:
        """`force`: how an overrunning step is forced once cancelled (e.g. Pool.terminate)."""
        self._steps.setdefault(phase, []).append(lambda stack: stack.push_step(step, name, force))

    def add_sync(self, phase: Phase, step: Callable[[], object]) -> None:
        self._steps.setdefault(phase, []).append(lambda stack: stack.callback(step))

    async def run(self) -> None:
        """Every step registered so far, in STOP_ORDER; an error of one is raised after the
        others have run."""
        steps, self._steps = self._steps, {}
        async with StopSteps(self.deadline_s) as stack:
            for phase in reversed(STOP_ORDER):  # an exit stack runs the last pushed first
                for push in steps.get(phase, []):
                    push(stack)
