"""The runs: one per way XIP-49 3.2.7 names for node 500 to misbehave, and honest runs
that must convict nobody (plays.py). A run ends with every node's export and the council's
job, and is scored: the flagged nodes against the expected ones, each flag proven again
from the exports alone."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass

from xnode.core import misbehavior
from xnode.core.registry_history import RegistryHistory
from xnode.devtools.byzantine import peer
from xnode.devtools.byzantine.council import ChainLookup, Council, Exported
from xnode.devtools.byzantine.network import NODE_IDS, SLOW_S, Network
from xnode.devtools.byzantine.plays import (
    ACCUSED,
    HONEST,
    Play,
    clock_ahead,
    days_ago,
    false_chain_payload,
    honest_history,
    lost_rows,
    misbehaving,
    restored_backup,
)


@dataclass(frozen=True)
class Kind:
    name: str
    what: str  # the report kind that should convict, or what an honest run checks
    play: Play
    misbehaving: bool = True


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    flags: dict[int, set[str]]  # flagged node -> bases (safety_proof, liveness_threshold)
    expected: set[int]
    verified: bool  # every flag proven again from the exports alone
    safety_reports: int
    phases: dict[str, float]  # seconds: play, export, council

    @property
    def seconds(self) -> float:
        return sum(self.phases.values())

    @property
    def flagged(self) -> set[int]:
        return set(self.flags)

    @property
    def precision(self) -> float:
        return len(self.flagged & self.expected) / len(self.flagged) if self.flagged else 1.0

    @property
    def recall(self) -> float:
        return len(self.flagged & self.expected) / len(self.expected) if self.expected else 1.0

    @property
    def passed(self) -> bool:
        if self.kind.misbehaving:
            return self.flagged == self.expected and self.verified
        proven = any("safety_proof" in bases for bases in self.flags.values())
        return not proven and self.safety_reports == 0


def byzantine(name: str, behavior: peer.Script, kind: int) -> Kind:
    """Node 500 misbehaves as `behavior` says; the run must flag it with `kind`."""
    return Kind(name, misbehavior.type_name(kind), misbehaving(behavior, kind))


def honest(name: str, what: str, play: Play) -> Kind:
    return Kind(name, what, play, misbehaving=False)


OLD_KEY_PACKAGES = "old key packages kept, no report"
KINDS: list[Kind] = [
    byzantine("equivocate", peer.equivocation, misbehavior.DUPLICATE_SEQUENCE_ID),
    byzantine("invalid payload", peer.invalid_payload, misbehavior.INVALID_PAYLOAD),
    byzantine("reorder", peer.reordering, misbehavior.OUT_OF_ORDER),
    byzantine("future timestamps", peer.future_timestamps, misbehavior.OUT_OF_ORDER),
    byzantine("unresponsive", peer.unresponsive, misbehavior.UNRESPONSIVE_NODE),
    byzantine("slow", peer.slow(SLOW_S + 2), misbehavior.SLOW_NODE),
    byzantine("forged envelope", peer.forged_envelope, misbehavior.INVALID_PAYLOAD),
    byzantine("withhold below a checkpoint", peer.withholding, misbehavior.WITHHOLDING),
    Kind(
        "false chain payload",
        misbehavior.type_name(misbehavior.BLOCKCHAIN_INCONSISTENCY),
        false_chain_payload(misbehavior.BLOCKCHAIN_INCONSISTENCY),
    ),
    honest("clock 3 min ahead", "accepted, no report", honest_history(clock_ahead(3))),
    honest("120 days later", OLD_KEY_PACKAGES, honest_history(days_ago(120, 0))),
    honest("200 days later", OLD_KEY_PACKAGES, honest_history(days_ago(200, 365))),
    honest("lost rows", "healed, no report", lost_rows),
    honest("restored backup", "healed, no report", restored_backup),
]


def by_name(name: str) -> Kind:
    return next(k for k in KINDS if k.name == name)


async def run(
    network: Network, kind: Kind, council: Council, chain: ChainLookup | None = None
) -> Outcome:
    """One run on fresh databases: play, export every node, the council's job, the score
    (chain payloads re-proven offline against `chain`)."""
    started = time.monotonic()
    directory = network.new_run(kind.name.replace(" ", "_"))
    await kind.play(network)
    played = time.monotonic()
    exports_root = directory / "exports"
    shutil.rmtree(exports_root, ignore_errors=True)
    nodes = HONEST if kind.misbehaving else NODE_IDS
    exports = list(
        await asyncio.gather(*(asyncio.to_thread(network.export, n, exports_root) for n in nodes))
    )
    exported_at = time.monotonic()
    flags = await asyncio.to_thread(council, exports, directory / "council")
    registry = RegistryHistory.from_json(network.registry_file.read_text())
    exported = Exported.read(exports, registry)
    ended = time.monotonic()
    return Outcome(
        kind,
        {node: set(bases) for node, bases in flags.items()},
        {ACCUSED} if kind.misbehaving else set(),
        all(exported.proves(n, chain) for n in flags),
        exported.safety_reports(),
        {
            "play": played - started,
            "export": exported_at - played,
            "council": ended - exported_at,
        },
    )


def _flag(node: int, bases: set[str]) -> str:
    return str(node) if bases == {"safety_proof"} else f"{node} ({', '.join(sorted(bases))})"


def table(outcomes: list[Outcome]) -> str:
    """The harness's table, in Markdown."""
    lines = [
        "| run | kind | flagged nodes | expected | precision | recall | verified offline |"
        " safety reports | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        flagged = ", ".join(_flag(n, o.flags[n]) for n in sorted(o.flags)) or "none"
        expected = ", ".join(map(str, sorted(o.expected))) or "none"
        verified = ("yes" if o.verified else "no") if o.flagged else "-"
        lines.append(
            f"| {o.kind.name} | {o.kind.what} | {flagged} | {expected} | {o.precision:.2f} |"
            f" {o.recall:.2f} | {verified} | {o.safety_reports} | {o.seconds:.0f} |"
        )
    return "\n".join(lines)
