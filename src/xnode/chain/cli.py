"""`xnode chain deploy | add-node | set-node-status | fund`: the registry owner's commands;
`xnode chain registry-snapshot`: the registry's history for the council's jobs (anyone).

Web3 is imported only when one of them runs, so other commands start fast."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xnode.config import Settings
from xnode.core.crypto import SigningKey

# A local devnet's (`xnode devnet`, anvil's default port).
DEFAULT_RPC_URL = "http://127.0.0.1:8545"
DEFAULT_CONTRACTS_FILE = "contracts.json"


def _public_key(args: argparse.Namespace) -> bytes:
    if args.public_key:
        return bytes.fromhex(args.public_key.removeprefix("0x"))
    return SigningKey.from_hex(Path(args.signer_key_file).read_text()).public_key


def _cmd_deploy(args: argparse.Namespace) -> int:
    from xnode.chain import admin

    w3 = admin.connect(args.rpc_url)
    contracts = admin.deploy_to_file(w3, admin.owner(args.owner_key), Path(args.out))
    print(json.dumps(contracts.as_dict(), indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _cmd_add_node(args: argparse.Namespace) -> int:
    from xnode.chain import admin

    w3 = admin.connect(args.rpc_url)
    account = admin.owner(args.owner_key)
    public_key = _public_key(args)
    node_id = admin.add_node(
        w3, account, Path(args.contracts_file), public_key, args.http_address, args.holder
    )
    print(f"node_id={node_id}")
    if args.fund_eth:
        to = admin.node_address(public_key)
        admin.fund(w3, account, to, int(args.fund_eth * 10**18))
        print(f"funded {to} with {args.fund_eth:g} ETH for chain publishes")
    return 0


def _cmd_set_status(args: argparse.Namespace) -> int:
    from xnode.chain import admin

    w3 = admin.connect(args.rpc_url)
    enabled = args.status == "enabled"
    admin.set_node_status(
        w3, admin.owner(args.owner_key), Path(args.contracts_file), args.node_id, enabled
    )
    print(f"node {args.node_id} is {args.status}")
    return 0


def _cmd_fund(args: argparse.Namespace) -> int:
    from xnode.chain import admin

    w3 = admin.connect(args.rpc_url)
    admin.fund(w3, admin.owner(args.owner_key), args.to, int(args.eth * 10**18))
    print(f"sent {args.eth:g} ETH to {args.to}")
    return 0


def _cmd_registry_snapshot(args: argparse.Namespace) -> int:
    import asyncio

    from xnode.chain.registry_history import read_registry_history
    from xnode.chain.rpc import ChainRpc

    data = json.loads(Path(args.contracts_file).read_text())
    address, first = str(data["node_registry"]), int(data.get("deployment_block", 0))

    async def read() -> str:
        rpc = ChainRpc(args.rpc_url)
        try:
            return (await read_registry_history(rpc, address, first)).to_json()
        finally:
            await rpc.close()

    text = asyncio.run(read())
    Path(args.out).write_text(text + "\n")
    nodes = len(json.loads(text)["nodes"])
    print(f"wrote {args.out}: {nodes} nodes of the NodeRegistry at {address}")
    return 0


def _with_settings(args: argparse.Namespace) -> None:
    """Flags not given come from the settings (XNODE_CHAIN_RPC_URL, XNODE_CHAIN_OWNER_KEY,
    XNODE_CONTRACTS_FILE), then the defaults for a local devnet."""
    settings = Settings()
    owner = settings.chain_owner_key
    args.rpc_url = args.rpc_url or settings.chain_rpc_url or DEFAULT_RPC_URL
    args.owner_key = args.owner_key or (owner.get_secret_value() if owner else None)
    if hasattr(args, "contracts_file"):
        contracts = settings.contracts_file or Path(DEFAULT_CONTRACTS_FILE)
        args.contracts_file = args.contracts_file or str(contracts)


def _run(args: argparse.Namespace) -> int:
    _with_settings(args)
    if not args.owner_key and args.chain_func is not _cmd_registry_snapshot:
        print("xnode chain: set --owner-key or XNODE_CHAIN_OWNER_KEY", file=sys.stderr)
        return 2
    try:
        return int(args.chain_func(args))
    except Exception as exc:  # an operator command: say what failed, no traceback
        print(f"xnode chain {args.chain_command}: {exc}", file=sys.stderr)
        return 1


def add_chain_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--rpc-url",
        help=f"chain JSON-RPC URL [env XNODE_CHAIN_RPC_URL, default {DEFAULT_RPC_URL}]",
    )
    common.add_argument(
        "--owner-key",
        help="hex private key of the deployer / registry owner [env XNODE_CHAIN_OWNER_KEY]",
    )
    with_file = argparse.ArgumentParser(add_help=False, parents=[common])
    with_file.add_argument(
        "--contracts-file",
        help=f"written by `xnode chain deploy` [env XNODE_CONTRACTS_FILE, default "
        f"{DEFAULT_CONTRACTS_FILE}]",
    )
    chain = sub.add_parser("chain", help="deploy contracts and manage the node registry")
    chain.set_defaults(func=_run)
    commands = chain.add_subparsers(dest="chain_command", required=True)

    deploy = commands.add_parser("deploy", parents=[common], help="deploy the contracts")
    deploy.add_argument("--out", default="contracts.json", help="contracts file to write")
    deploy.set_defaults(chain_func=_cmd_deploy)

    add = commands.add_parser("add-node", parents=[with_file], help="register a node")
    key = add.add_mutually_exclusive_group(required=True)
    key.add_argument("--public-key", help="node public key, hex (65 bytes, 0x04...)")
    key.add_argument("--signer-key-file", help="or the node's private key file")
    add.add_argument("--http-address", required=True, help="the node's public endpoint")
    add.add_argument("--holder", help="address that holds the node NFT (default: owner)")
    add.add_argument("--fund-eth", type=float, default=0.0, help="ETH for its chain publishes")
    add.set_defaults(chain_func=_cmd_add_node)

    status = commands.add_parser("set-node-status", parents=[with_file], help="enable/disable")
    status.add_argument("--node-id", type=int, required=True)
    status.add_argument("status", choices=["enabled", "disabled"])
    status.set_defaults(chain_func=_cmd_set_status)

    snapshot = commands.add_parser(
        "registry-snapshot",
        parents=[with_file],
        help="write the registry's history (keys, enabled over time) for the council's jobs",
    )
    snapshot.add_argument("--out", required=True, help="registry snapshot JSON to write")
    snapshot.set_defaults(chain_func=_cmd_registry_snapshot)

    fund = commands.add_parser("fund", parents=[common], help="send ETH to an account")
    fund.add_argument("--to", required=True, help="address")
    fund.add_argument("--eth", type=float, required=True)
    fund.set_defaults(chain_func=_cmd_fund)
