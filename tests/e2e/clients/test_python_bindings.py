"""The official client library (libxmtp 1.10.0, PyPI `xmtp-bindings`) against real xnode
processes: three nodes on the chain registry (anvil), two gateways, real Postgres.

Users register inboxes (identity updates go to the chain), find each other with GetInboxIds,
talk in an MLS group, add a third member and a second installation, stream live, and keep
working when the node they read from is killed (each node killed and frozen in turn, with
users of the Node SDK beside them: test_node_sdk.py). The scenarios are in scenarios.py;
each runs in a spawned process (runner.py), this process owns the network."""

from __future__ import annotations

import multiprocessing
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.clients import runner
from tests.e2e.clients.conftest import ClientNetwork
from tests.e2e.clients.network_view import NetworkView

pytestmark = pytest.mark.slow
SCENARIO_TIMEOUT_S = 240.0
SIGNALS = {"freeze": signal.SIGSTOP, "thaw": signal.SIGCONT}


def run_scenario(
    name: str, network: ClientNetwork, directory: Path, timeout_s: float = SCENARIO_TIMEOUT_S
) -> float:
    """Runs scenarios.<name> in a spawned process, kills nodes when it asks, and fails with
    its traceback when it fails. Returns how long it took."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    nodes = network.nodes
    view = NetworkView(
        addresses=dict(nodes.addresses),
        metrics=dict(network.metrics),
        public_keys={n: k.public_key for n, k in nodes.spec.keys.items()},
        gateway_urls=[g.url for g in network.gateways],
        live=set(nodes.processes),
        control=theirs,
    )
    process = context.Process(target=runner.run, args=(name, view, theirs, str(directory)))
    process.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if ours.poll(0.2):
                kind, value = ours.recv()
                if kind == "kill":
                    nodes.kill(value)
                    ours.send(("killed", value))
                elif kind in ("freeze", "thaw", "restart"):
                    if kind == "restart":
                        network.restart(value)
                    else:
                        network.signal(value, SIGNALS[kind])
                    ours.send((f"{kind}:done", value))
                elif kind == "done":
                    return float(value)
                else:
                    pytest.fail(f"scenario {name} failed:\n{value}")
            elif not process.is_alive():
                pytest.fail(f"scenario {name} exited ({process.exitcode}) without a report")
            if time.monotonic() > deadline:
                pytest.fail(f"scenario {name} took longer than {timeout_s}s")
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join(30)


def test_a_conversation_between_users_of_different_gateways(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    took = run_scenario("conversation_across_gateways", client_network, tmp_path)
    print(f"conversation scenario took {took:.1f}s")


def test_a_user_keeps_talking_when_the_node_it_reads_from_is_killed(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    took = run_scenario("read_node_killed", client_network, tmp_path)
    print(f"failover scenario took {took:.1f}s")


def test_every_identity_update_of_the_client_is_validated_and_accepted(
    client_network: ClientNetwork, tmp_path: Path
) -> None:
    took = run_scenario("identity_lifecycle", client_network, tmp_path)
    print(f"identity scenario took {took:.1f}s")
