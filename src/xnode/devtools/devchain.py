"""The chain of a local network (the devnet, docker-compose): anvil whose state survives
restarts, the contracts deployed once, the network's nodes registered and funded."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract import Contract

from xnode.chain import admin
from xnode.chain.anvil import (
    DEFAULT_CHAIN_ID,
    DEFAULT_DEV_PRIVATE_KEYS,
    AnvilProcess,
    find_anvil_binary,
    rpc_call,
    start_anvil,
)
from xnode.chain.contracts import NODE_REGISTRY, contract_at
from xnode.chain.deployment import ContractsFileError, load_contracts_file
from xnode.config import Settings
from xnode.core.registry import NodeEntry

# (node id, public key, http address) of a node the network should have.
PlannedNode = tuple[int, bytes, str]


@dataclass
class DevChain:
    url: str
    w3: Web3
    owner: LocalAccount
    contracts_file: Path
    anvil: AnvilProcess | None = None

    @classmethod
    def start(
        cls, state: Path, port: int, name: str = "", chain_id: int = DEFAULT_CHAIN_ID
    ) -> DevChain:
        """Starts anvil; --state loads the file at start and dumps to it on SIGINT/SIGTERM.
        `name` prefixes its files (a second chain: the registry's, apart from the app chain)."""
        prefix = f"{name}-" if name else ""
        anvil = start_anvil(
            binary=find_anvil_binary(override=Settings().anvil_bin),
            port=port,
            log_path=state / f"{prefix}anvil.log",
            extra_args=("--state", str(state / f"{prefix}anvil-state.json")),
            chain_id=chain_id,
        )
        try:
            chain = cls.attach(anvil.url, state / f"{prefix}contracts.json", anvil.private_keys[0])
        except BaseException:
            anvil.stop()
            raise
        chain.anvil = anvil
        return chain

    @classmethod
    def attach(
        cls,
        url: str,
        contracts_file: Path,
        owner_key: str = DEFAULT_DEV_PRIVATE_KEYS[0],
        wait_s: float = 0.0,
    ) -> DevChain:
        """A chain someone else runs; deploys the contracts unless the file names them."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                w3 = admin.connect(url)
                break
            except admin.AdminError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        chain = cls(url, w3, admin.owner(owner_key), contracts_file)
        if not chain._deployed():
            admin.deploy_to_file(w3, chain.owner, contracts_file)
        return chain

    def _deployed(self) -> bool:
        """True when the contracts file names a registry that exists on this chain."""
        try:
            contracts = load_contracts_file(self.contracts_file)
        except ContractsFileError:
            return False
        return bool(self.w3.eth.get_code(contracts.node_registry))

    def _registry(self) -> Contract:
        contracts = load_contracts_file(self.contracts_file)
        return contract_at(self.w3, NODE_REGISTRY, contracts.node_registry)

    def registered(self) -> dict[int, NodeEntry]:
        nodes = self._registry().functions.allNodes().call()
        return {int(n[0]): NodeEntry(int(n[0]), bytes(n[1]), str(n[2]), bool(n[3])) for n in nodes}

    def register(self, nodes: Sequence[PlannedNode], fund_wei: int | None) -> None:
        """Adds the nodes the registry lacks (ids are handed out in order: 100, 200, ...) and
        tops up every node's signer account, which pays for its chain publishes (`fund_wei`
        None: the payloads go to another chain, see fund)."""
        known = self.registered()
        for node_id, public_key, http_address in nodes:
            if node_id in known and known[node_id].public_key != public_key:
                raise RuntimeError(f"node {node_id} is registered with another key")
            if node_id not in known:
                got = admin.add_node(
                    self.w3, self.owner, self.contracts_file, public_key, http_address
                )
                if got != node_id:
                    raise RuntimeError(f"the registry gave id {got}, expected {node_id}")
        if fund_wei is not None:
            self.fund(nodes, fund_wei)

    def fund(self, nodes: Sequence[PlannedNode], fund_wei: int) -> None:
        """Tops up every node's signer account on this chain."""
        for _, public_key, _ in nodes:
            rpc_call(self.url, "anvil_setBalance", [admin.node_address(public_key), hex(fund_wei)])

    def node_env(self, registry: DevChain | None = None) -> dict[str, str]:
        """What makes a node use this chain, for its registry too (or `registry`'s chain)."""
        env = {
            "XNODE_CHAIN_RPC_URL": self.url,
            "XNODE_CONTRACTS_FILE": str(self.contracts_file),
            "XNODE_REGISTRY_SOURCE": "chain",
        }
        if registry is not None:
            env["XNODE_REGISTRY_RPC_URL"] = registry.url
            env["XNODE_REGISTRY_CONTRACTS_FILE"] = str(registry.contracts_file)
        return env

    def describe(self) -> dict[str, object]:
        contracts = load_contracts_file(self.contracts_file)
        return {
            "rpc_url": self.url,
            "contracts_file": str(self.contracts_file),
            "owner_key": "0x" + bytes(self.owner.key).hex(),
            **contracts.as_dict(),
        }

    def stop(self) -> None:
        if self.anvil is not None:
            self.anvil.stop(timeout=30)
