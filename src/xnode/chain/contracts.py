"""Compiled contract artifacts and deployment helpers.

Artifacts live in ``xnode/chain/artifacts/<Name>.json`` and are produced from ``contracts/*.sol``
by ``node scripts/compile_contracts.js``. Deployment uses a synchronous ``Web3`` and a local
account; transactions are sent one at a time (each waits for its receipt), so an account's
nonces stay in order.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final, cast

from eth_account.signers.local import LocalAccount
from eth_typing import ChecksumAddress
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.types import TxParams, TxReceipt

ARTIFACTS_DIR: Final = Path(__file__).resolve().parent / "artifacts"

NODE_REGISTRY: Final = "NodeRegistry"
GROUP_MESSAGES: Final = "GroupMessages"
IDENTITY_UPDATES: Final = "IdentityUpdates"
ERC1967_PROXY: Final = "ERC1967Proxy"

# keccak256("eip1967.proxy.implementation") - 1
ERC1967_IMPLEMENTATION_SLOT: Final = int(
    "360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc", 16
)

DEFAULT_RECEIPT_TIMEOUT: Final = 60.0


class TransactionFailedError(RuntimeError):
    """A mined transaction had status 0."""

    def __init__(self, receipt: TxReceipt) -> None:
        super().__init__(f"transaction {receipt['transactionHash'].to_0x_hex()} reverted")
        self.receipt = receipt


@dataclass(frozen=True)
class Artifact:
    name: str
    abi: list[dict[str, Any]]
    bytecode: str  # 0x-prefixed creation bytecode
    source_sha256: str
    solc_version: str


@dataclass(frozen=True)
class Deployment:
    name: str
    address: ChecksumAddress
    block_number: int
    tx_hash: HexBytes
    gas_used: int


@dataclass(frozen=True)
class DeployedContracts:
    chain_id: int
    node_registry: ChecksumAddress
    group_messages: ChecksumAddress  # proxy
    identity_updates: ChecksumAddress  # proxy
    group_messages_implementation: ChecksumAddress
    identity_updates_implementation: ChecksumAddress
    deployment_block: int  # block of the first deployment; indexers can start here

    def as_dict(self) -> dict[str, str | int]:
        return {
            "chain_id": self.chain_id,
            "node_registry": self.node_registry,
            "group_messages": self.group_messages,
            "identity_updates": self.identity_updates,
            "group_messages_implementation": self.group_messages_implementation,
            "identity_updates_implementation": self.identity_updates_implementation,
            "deployment_block": self.deployment_block,
        }


def sources_sha256(contracts_dir: Path) -> str:
    """sha256 of contracts_dir/*.sol contents, concatenated in sorted file-name order.

    Matches ``sourceSha256`` written by scripts/compile_contracts.js."""
    digest = hashlib.sha256()
    files = sorted(contracts_dir.glob("*.sol"), key=lambda p: p.name)
    if not files:
        raise FileNotFoundError(f"no .sol files in {contracts_dir}")
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def artifact_names() -> list[str]:
    return sorted(p.stem for p in ARTIFACTS_DIR.glob("*.json"))


@cache
def load_artifact(name: str) -> Artifact:
    path = ARTIFACTS_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no artifact {path}; run `node scripts/compile_contracts.js` after `npm ci`"
        )
    data = json.loads(path.read_text())
    return Artifact(
        name=str(data["contractName"]),
        abi=cast(list[dict[str, Any]], data["abi"]),
        bytecode=str(data["bytecode"]),
        source_sha256=str(data["sourceSha256"]),
        solc_version=str(data["solcVersion"]),
    )


def contract_at(w3: Web3, name: str, address: str) -> Contract:
    """A web3 contract object for artifact ``name`` at ``address`` (use the implementation's
    name for a proxy)."""
    return w3.eth.contract(address=Web3.to_checksum_address(address), abi=load_artifact(name).abi)


def send_transaction(
    w3: Web3,
    account: LocalAccount,
    tx: TxParams,
    *,
    timeout: float = DEFAULT_RECEIPT_TIMEOUT,
) -> TxReceipt:
    """Sign ``tx`` with ``account``, send it and wait for the receipt.

    Fills in from/nonce/chainId/gas/fees when missing. A transaction that would revert raises
    web3's ContractLogicError during gas estimation and is never sent; one that is mined with
    status 0 raises TransactionFailedError.
    """
    params: dict[str, Any] = dict(tx)
    params.setdefault("from", account.address)
    params.setdefault("chainId", w3.eth.chain_id)
    if "nonce" not in params:
        params["nonce"] = w3.eth.get_transaction_count(account.address, "pending")
    if "gas" not in params:
        params["gas"] = w3.eth.estimate_gas(cast(TxParams, params))
    if "gasPrice" not in params and "maxFeePerGas" not in params:
        base_fee = int(w3.eth.get_block("latest").get("baseFeePerGas", 0))
        priority = int(w3.eth.max_priority_fee)
        params["maxPriorityFeePerGas"] = priority
        params["maxFeePerGas"] = 2 * base_fee + priority
    signed = account.sign_transaction(params)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=timeout, poll_latency=0.05)
    if receipt["status"] != 1:
        raise TransactionFailedError(receipt)
    return receipt


def transact(
    w3: Web3,
    account: LocalAccount,
    contract: Contract,
    function: str,
    *args: Any,
    timeout: float = DEFAULT_RECEIPT_TIMEOUT,
) -> TxReceipt:
    """Call ``contract.function(*args)`` in a transaction from ``account``."""
    tx = contract.functions[function](*args).build_transaction({"from": account.address})
    return send_transaction(w3, account, tx, timeout=timeout)


def deploy(w3: Web3, account: LocalAccount, name: str, *args: Any) -> Deployment:
    """Deploy artifact ``name`` with constructor ``args`` from ``account``."""
    artifact = load_artifact(name)
    factory = w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
    tx = factory.constructor(*args).build_transaction({"from": account.address})
    receipt = send_transaction(w3, account, tx)
    address = receipt["contractAddress"]
    if address is None:
        raise RuntimeError(f"deploying {name}: receipt has no contractAddress")
    return Deployment(
        name=name,
        address=Web3.to_checksum_address(address),
        block_number=int(receipt["blockNumber"]),
        tx_hash=HexBytes(receipt["transactionHash"]),
        gas_used=int(receipt["gasUsed"]),
    )


def deploy_upgradeable(
    w3: Web3, account: LocalAccount, name: str, admin: str
) -> tuple[Deployment, Deployment]:
    """Deploy implementation ``name`` and an ERC1967Proxy initialized with
    ``initialize(admin)``. Returns (implementation, proxy)."""
    implementation = deploy(w3, account, name)
    init_data = contract_at(w3, name, implementation.address).encode_abi(
        "initialize", args=[Web3.to_checksum_address(admin)]
    )
    proxy = deploy(w3, account, ERC1967_PROXY, implementation.address, init_data)
    return implementation, proxy


def implementation_of(w3: Web3, proxy: str) -> ChecksumAddress:
    """The implementation address stored in an ERC1967 proxy."""
    raw = w3.eth.get_storage_at(Web3.to_checksum_address(proxy), ERC1967_IMPLEMENTATION_SLOT)
    return Web3.to_checksum_address(bytes(raw)[-20:])


def deploy_all(w3: Web3, admin_account: LocalAccount) -> DeployedContracts:
    """Deploy NodeRegistry (owned by ``admin_account``) and the GroupMessages and
    IdentityUpdates proxies (``admin_account`` holds DEFAULT_ADMIN_ROLE)."""
    registry = deploy(w3, admin_account, NODE_REGISTRY)
    gm_impl, gm_proxy = deploy_upgradeable(w3, admin_account, GROUP_MESSAGES, admin_account.address)
    iu_impl, iu_proxy = deploy_upgradeable(
        w3, admin_account, IDENTITY_UPDATES, admin_account.address
    )
    return DeployedContracts(
        chain_id=int(w3.eth.chain_id),
        node_registry=registry.address,
        group_messages=gm_proxy.address,
        identity_updates=iu_proxy.address,
        group_messages_implementation=gm_impl.address,
        identity_updates_implementation=iu_impl.address,
        deployment_block=registry.block_number,
    )
