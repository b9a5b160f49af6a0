"""What an identity-update check costs (XIP-46, xnode.core.associations.apply_update).

    .venv/bin/python bench/bench_identity.py [--rounds 50]

Replays the official client's captured identity updates (tests/fixtures/official_client:
identity_update.hex, identity_lifecycle.hex) from an empty state, `--rounds` times each, on
one core, and prints the cost per update and the signatures verified, beside the load.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.associations import AssociationState, apply_update

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "official_client"


def captured(name: str) -> list[association_pb2.IdentityUpdate]:
    lines = (FIXTURES / f"{name}.hex").read_text().split()
    return [
        envelopes_pb2.ClientEnvelope.FromString(bytes.fromhex(x)).identity_update for x in lines
    ]


def replay_cost(updates: list[association_pb2.IdentityUpdate], rounds: int) -> float:
    """Seconds per update."""
    started = time.perf_counter()
    for _ in range(rounds):
        states: dict[str, AssociationState] = {}
        for update in updates:
            states[update.inbox_id] = apply_update(states.get(update.inbox_id), update)
    return (time.perf_counter() - started) / (rounds * len(updates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    print("| fixture | updates | signatures | ms per update | updates/s (1 core) | load |")
    print("|---|---|---|---|---|---|")
    for name in ("identity_update", "identity_lifecycle"):
        updates = captured(name)
        signatures = sum(2 if a.HasField("add") else 1 for u in updates for a in u.actions)
        each = replay_cost(updates, args.rounds)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"| {name} | {len(updates)} | {signatures} | {each * 1e3:.2f} | {1 / each:.0f} |"
            f" {load} |"
        )


if __name__ == "__main__":
    main()
