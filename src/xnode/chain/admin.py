"""Operator commands on the chain (`xnode chain ...`): deploy the contracts, add nodes, change
their status, fund accounts. Synchronous web3: one transaction at a time, each waited for."""

from __future__ import annotations

from pathlib import Path

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.types import Wei

from xnode.chain import abi
from xnode.chain.contracts import (
    NODE_REGISTRY,
    DeployedContracts,
    contract_at,
    deploy_all,
    send_transaction,
    transact,
)
from xnode.chain.deployment import load_contracts_file, write_contracts_file
from xnode.core.crypto import address_of


class AdminError(RuntimeError):
    pass


def connect(rpc_url: str) -> Web3:
    w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))
    if not w3.is_connected():
        raise AdminError(f"cannot reach the chain RPC {rpc_url}")
    return w3


def owner(key_hex: str) -> LocalAccount:
    account: LocalAccount = Account.from_key(key_hex)
    return account


def deploy_to_file(w3: Web3, account: LocalAccount, out: Path) -> DeployedContracts:
    contracts = deploy_all(w3, account)
    write_contracts_file(out, contracts)
    return contracts


def add_node(
    w3: Web3,
    account: LocalAccount,
    contracts_file: Path,
    public_key: bytes,
    http_address: str,
    holder: str | None = None,
) -> int:
    """Registers a node (owner only); returns its node id."""
    contracts = load_contracts_file(contracts_file)
    registry = contract_at(w3, NODE_REGISTRY, contracts.node_registry)
    receipt = transact(
        w3,
        account,
        registry,
        "addNode",
        Web3.to_checksum_address(holder or account.address),
        public_key,
        http_address,
    )
    for entry in receipt["logs"]:
        if entry["topics"] and bytes(entry["topics"][0]) == abi.NODE_ADDED:
            return int.from_bytes(bytes(entry["topics"][1]), "big")
    raise AdminError("addNode was mined but emitted no NodeAdded event")


def set_node_status(
    w3: Web3, account: LocalAccount, contracts_file: Path, node_id: int, enabled: bool
) -> None:
    contracts = load_contracts_file(contracts_file)
    registry = contract_at(w3, NODE_REGISTRY, contracts.node_registry)
    transact(w3, account, registry, "setNodeStatus", node_id, enabled)


def fund(w3: Web3, account: LocalAccount, to: str, wei: int) -> None:
    send_transaction(
        w3, account, {"to": Web3.to_checksum_address(to), "value": Wei(wei), "gas": 21_000}
    )


def node_address(public_key: bytes) -> str:
    """The account a node pays chain transactions from by default (its signer key's)."""
    return Web3.to_checksum_address(address_of(public_key))
