"""Prepares the docker-compose network (docker-compose.yml, service `setup`): a key per
node in the state volume, the contracts on the chain, every node registered and funded.
Safe to run again: it only adds what is missing.

    python -m xnode.devtools.compose_init --state /state --rpc-url http://anvil:8545 \\
        --node node1:5050 --node node2:5050 --node node3:5050
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from xnode.devtools.devchain import DevChain
from xnode.devtools.devnet import FUND_WEI, load_key


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compose_init", description=__doc__)
    parser.add_argument("--state", required=True, help="directory shared with the nodes")
    parser.add_argument("--rpc-url", required=True)
    parser.add_argument("--node", action="append", required=True, help="host:port, in id order")
    parser.add_argument("--chown", type=int, help="uid that must read the keys (the nodes')")
    args = parser.parse_args(argv)
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    chain = DevChain.attach(args.rpc_url, state / "contracts.json", wait_s=60)
    planned = []
    for i, address in enumerate(args.node):
        node_id = 100 * (i + 1)
        key = load_key(state / f"node-{node_id}.key")
        planned.append((node_id, key.public_key, f"http://{address}"))
    chain.register(planned, FUND_WEI)
    if args.chown is not None:
        for path in state.iterdir():
            os.chown(path, args.chown, -1)
    for node_id, _, address in planned:
        print(f"node {node_id} registered at {address}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
