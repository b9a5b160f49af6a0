"""The contracts file: chain id, contract addresses and deployment block, as written by
`xnode chain deploy` and read by every node."""

from __future__ import annotations

import json
from pathlib import Path

from web3 import Web3

from xnode.chain.contracts import DeployedContracts

_REQUIRED = ("node_registry", "group_messages", "identity_updates")


class ContractsFileError(ValueError):
    pass


def write_contracts_file(path: Path, contracts: DeployedContracts) -> None:
    path.write_text(json.dumps(contracts.as_dict(), indent=2) + "\n")


def load_contracts_file(path: Path) -> DeployedContracts:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ContractsFileError(f"cannot read contracts file {path}: {exc}") from exc
    try:
        addresses = {name: Web3.to_checksum_address(data[name]) for name in _REQUIRED}
        # The node talks to the proxies only; implementations are informational.
        return DeployedContracts(
            chain_id=int(data["chain_id"]),
            deployment_block=int(data.get("deployment_block", 0)),
            group_messages_implementation=Web3.to_checksum_address(
                data.get("group_messages_implementation") or addresses["group_messages"]
            ),
            identity_updates_implementation=Web3.to_checksum_address(
                data.get("identity_updates_implementation") or addresses["identity_updates"]
            ),
            **addresses,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ContractsFileError(f"contracts file {path} is incomplete or invalid: {exc}") from exc


def load_registry_file(path: Path) -> tuple[int, str]:
    """(chain id, NodeRegistry address) of a contracts file; when the registry's chain is
    apart from the app chain's (registry_contracts_file), nothing else needs to be in it."""
    try:
        data = json.loads(path.read_text())
        return int(data["chain_id"]), Web3.to_checksum_address(data["node_registry"])
    except (OSError, ValueError) as exc:
        raise ContractsFileError(f"cannot read registry contracts file {path}: {exc}") from exc
    except (KeyError, TypeError) as exc:
        raise ContractsFileError(
            f"registry contracts file {path} needs chain_id and node_registry: {exc}"
        ) from exc
