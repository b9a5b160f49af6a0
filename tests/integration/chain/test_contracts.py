"""NodeRegistry, GroupMessages and IdentityUpdates on a real anvil."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_account.signers.local import LocalAccount
from eth_keys.datatypes import PrivateKey
from eth_utils.crypto import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractCustomError
from web3.types import LogReceipt, TxReceipt

from xnode.chain.anvil import DEFAULT_DEV_ADDRESSES, AnvilProcess
from xnode.chain.contracts import (
    ERC1967_PROXY,
    GROUP_MESSAGES,
    IDENTITY_UPDATES,
    NODE_REGISTRY,
    DeployedContracts,
    artifact_names,
    contract_at,
    deploy,
    implementation_of,
    load_artifact,
    sources_sha256,
    transact,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
SECP256K1_P = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFC2F
DEFAULT_ADMIN_ROLE = b"\x00" * 32
MAX_PAYLOAD_SIZE = 256 * 1024


# --------------------------------------------------------------------------- helpers


def signing_key(seed: int) -> bytes:
    """A valid 65-byte uncompressed secp256k1 public key."""
    private = PrivateKey(keccak(seed.to_bytes(32, "big")))
    return b"\x04" + private.public_key.to_bytes()


def topic(signature: str) -> bytes:
    return keccak(text=signature)


def _types(signature: str) -> list[str]:
    inner = signature[signature.index("(") + 1 : -1]
    return [t for t in inner.split(",") if t]


@contextmanager
def reverts_with(signature: str, *args: Any) -> Iterator[None]:
    """Expect a revert with custom error `signature` (and exactly `args`, when given)."""
    with pytest.raises(ContractCustomError) as info:
        yield
    data = info.value.data
    assert isinstance(data, str), data
    raw = bytes.fromhex(data.removeprefix("0x"))
    assert raw[:4] == keccak(text=signature)[:4], f"expected {signature}, got {data}"
    if args:
        assert raw[4:] == abi_encode(_types(signature), list(args)), f"{signature}: {data}"


def logs_with(receipt: TxReceipt, address: str, signature: str) -> list[LogReceipt]:
    return [
        log
        for log in receipt["logs"]
        if log["address"] == address and bytes(log["topics"][0]) == topic(signature)
    ]


def uint_topic(value: int) -> bytes:
    return value.to_bytes(32, "big")


def address_topic(address: str) -> bytes:
    return bytes(12) + bytes.fromhex(address[2:])


# --------------------------------------------------------------------------- artifacts & anvil


def test_artifacts_are_fresh() -> None:
    names = artifact_names()
    assert names == sorted([ERC1967_PROXY, GROUP_MESSAGES, IDENTITY_UPDATES, NODE_REGISTRY])
    expected_sha = sources_sha256(REPO_ROOT / "contracts")
    pinned_solc = json.loads((REPO_ROOT / "package.json").read_text())["devDependencies"]["solc"]
    for name in names:
        artifact = load_artifact(name)
        assert artifact.name == name
        assert artifact.source_sha256 == expected_sha, (
            f"{name} artifact is stale (contracts/*.sol changed): "
            "run `node scripts/compile_contracts.js` and commit src/xnode/chain/artifacts/"
        )
        assert artifact.solc_version.startswith(f"{pinned_solc}+"), (
            f"{name} was built with solc {artifact.solc_version}, package.json pins {pinned_solc}: "
            "run `npm ci && node scripts/compile_contracts.js`"
        )
        assert artifact.bytecode.startswith("0x") and len(artifact.bytecode) > 2


def test_anvil_fixture(anvil: AnvilProcess, w3: Web3, accounts: list[LocalAccount]) -> None:
    assert anvil.proc.poll() is None
    assert anvil.url == f"http://127.0.0.1:{anvil.port}" and anvil.port > 0
    assert w3.eth.chain_id == 31337
    assert [a.address for a in accounts] == list(DEFAULT_DEV_ADDRESSES)
    assert list(w3.eth.accounts) == list(DEFAULT_DEV_ADDRESSES)


def test_deploy_all(w3: Web3, admin: LocalAccount, deployed: DeployedContracts) -> None:
    assert deployed.chain_id == 31337
    first_tx = w3.eth.get_block(deployed.deployment_block)["transactions"][0]
    assert isinstance(first_tx, bytes)
    assert w3.eth.get_transaction(first_tx)["to"] is None  # a contract creation
    for proxy, impl in (
        (deployed.group_messages, deployed.group_messages_implementation),
        (deployed.identity_updates, deployed.identity_updates_implementation),
    ):
        assert implementation_of(w3, proxy) == impl
        assert len(w3.eth.get_code(proxy)) > 0
    registry = contract_at(w3, NODE_REGISTRY, deployed.node_registry)
    assert registry.functions.owner().call() == admin.address
    for name, proxy in (
        (GROUP_MESSAGES, deployed.group_messages),
        (IDENTITY_UPDATES, deployed.identity_updates),
    ):
        c = contract_at(w3, name, proxy)
        assert c.functions.hasRole(DEFAULT_ADMIN_ROLE, admin.address).call() is True
        assert c.functions.paused().call() is False
        assert c.functions.lastSequenceId().call() == 0


# --------------------------------------------------------------------------- NodeRegistry


@pytest.fixture
def registry(w3: Web3, deployed: DeployedContracts) -> Contract:
    return contract_at(w3, NODE_REGISTRY, deployed.node_registry)


def add_three_nodes(
    w3: Web3, admin: LocalAccount, registry: Contract, holders: list[LocalAccount]
) -> list[TxReceipt]:
    return [
        transact(
            w3, admin, registry, "addNode", holder.address, signing_key(i), f"https://node{i}.test"
        )
        for i, holder in enumerate(holders, start=1)
    ]


def test_owner_adds_nodes_with_ids_100_200_300(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], registry: Contract
) -> None:
    holders = accounts[1:4]
    # The return value, as seen by a call before the transaction.
    first = registry.functions.addNode(holders[0].address, signing_key(1), "https://node1.test")
    assert first.call({"from": admin.address}) == 100

    receipts = add_three_nodes(w3, admin, registry, holders)
    sig = "NodeAdded(uint32,address,bytes,string)"
    for i, (receipt, holder) in enumerate(zip(receipts, holders, strict=True), start=1):
        (log,) = logs_with(receipt, registry.address, sig)
        assert [bytes(t) for t in log["topics"]] == [
            topic(sig),
            uint_topic(100 * i),
            address_topic(holder.address),
        ]
        assert abi_decode(["bytes", "string"], bytes(log["data"])) == (
            signing_key(i),
            f"https://node{i}.test",
        )
        (transfer,) = logs_with(receipt, registry.address, "Transfer(address,address,uint256)")
        assert bytes(transfer["topics"][3]) == uint_topic(100 * i)

    assert registry.functions.nodeCount().call() == 3
    assert registry.functions.allNodes().call() == [
        (100 * i, signing_key(i), f"https://node{i}.test", True) for i in (1, 2, 3)
    ]
    assert registry.functions.getNode(200).call() == (
        200,
        signing_key(2),
        "https://node2.test",
        True,
    )
    assert [registry.functions.ownerOf(100 * i).call() for i in (1, 2, 3)] == [
        h.address for h in holders
    ]
    with reverts_with("ERC721NonexistentToken(uint256)", 150):
        registry.functions.getNode(150).call()


def test_non_owner_cannot_add_node(
    w3: Web3, accounts: list[LocalAccount], registry: Contract
) -> None:
    intruder = accounts[5]
    with reverts_with("OwnableUnauthorizedAccount(address)", intruder.address):
        transact(
            w3, intruder, registry, "addNode", intruder.address, signing_key(1), "https://x.test"
        )
    assert registry.functions.nodeCount().call() == 0


def _off_curve_key() -> bytes:
    key = bytearray(signing_key(7))
    key[-1] ^= 1  # flip the parity bit of y: no longer on the curve
    return bytes(key)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(signing_key(1)[:64], id="64-bytes"),
        pytest.param(signing_key(1) + b"\x00", id="66-bytes"),
        pytest.param(signing_key(1)[1:], id="no-prefix"),
        pytest.param(b"\x02" + signing_key(1)[1:], id="prefix-02"),
        pytest.param(b"\x02" + signing_key(1)[1:33], id="compressed"),
        pytest.param(b"", id="empty"),
        pytest.param(_off_curve_key(), id="off-curve"),
        pytest.param(b"\x04" + uint_topic(SECP256K1_P) + uint_topic(0), id="x-not-in-field"),
    ],
)
def test_invalid_signing_key_reverts(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], registry: Contract, key: bytes
) -> None:
    with reverts_with("InvalidSigningKey()"):
        transact(w3, admin, registry, "addNode", accounts[1].address, key, "https://x.test")
    assert registry.functions.nodeCount().call() == 0


def test_duplicate_signing_key_and_empty_address_revert(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], registry: Contract
) -> None:
    transact(w3, admin, registry, "addNode", accounts[1].address, signing_key(1), "https://a.test")
    with reverts_with("DuplicateSigningKey()"):
        transact(
            w3, admin, registry, "addNode", accounts[2].address, signing_key(1), "https://b.test"
        )
    with reverts_with("EmptyHttpAddress()"):
        transact(w3, admin, registry, "addNode", accounts[2].address, signing_key(2), "")
    assert registry.functions.nodeCount().call() == 1


def test_status_changes_emit_events_and_update_views(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], registry: Contract
) -> None:
    add_three_nodes(w3, admin, registry, accounts[1:4])
    sig = "NodeStatusChanged(uint32,bool)"

    def set_status(function: str, node_id: int, enabled: bool) -> None:
        receipt = transact(w3, admin, registry, function, node_id, enabled)
        (log,) = logs_with(receipt, registry.address, sig)
        assert [bytes(t) for t in log["topics"]] == [topic(sig), uint_topic(node_id)]
        assert abi_decode(["bool"], bytes(log["data"])) == (enabled,)

    set_status("setNodeStatus", 200, False)
    assert registry.functions.getNode(200).call()[3] is False
    assert [n[3] for n in registry.functions.allNodes().call()] == [True, False, True]
    set_status("setNodeStatus", 200, False)  # unchanged value: still an event
    set_status("updateHealth", 200, True)
    assert registry.functions.getNode(200).call() == (
        200,
        signing_key(2),
        "https://node2.test",
        True,
    )

    with reverts_with("OwnableUnauthorizedAccount(address)", accounts[2].address):
        transact(w3, accounts[2], registry, "setNodeStatus", 200, False)
    with reverts_with("ERC721NonexistentToken(uint256)", 400):
        transact(w3, admin, registry, "setNodeStatus", 400, False)


def test_node_data_is_immutable(registry: Contract) -> None:
    mutating = sorted(
        item["name"]
        for item in registry.abi
        if item["type"] == "function" and item["stateMutability"] not in ("view", "pure")
    )
    # No function that changes a node's key or http address (XIP-49 3.1.1).
    assert mutating == [
        "addNode",
        "approve",
        "renounceOwnership",
        "safeTransferFrom",
        "safeTransferFrom",
        "setApprovalForAll",
        "setNodeStatus",
        "transferFrom",
        "transferOwnership",
        "updateHealth",
    ]


def test_holder_cannot_transfer_node(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], registry: Contract
) -> None:
    holder, other = accounts[1], accounts[6]
    add_three_nodes(w3, admin, registry, accounts[1:4])
    with reverts_with("TransferNotAllowed(address)", holder.address):
        transact(w3, holder, registry, "transferFrom", holder.address, other.address, 100)
    with reverts_with("TransferNotAllowed(address)", holder.address):
        transact(
            w3,
            holder,
            registry,
            "safeTransferFrom(address,address,uint256)",
            holder.address,
            other.address,
            100,
        )
    # An approval does not help either.
    transact(w3, holder, registry, "approve", other.address, 100)
    with reverts_with("TransferNotAllowed(address)", other.address):
        transact(w3, other, registry, "transferFrom", holder.address, other.address, 100)
    assert registry.functions.ownerOf(100).call() == holder.address


def test_owner_can_transfer_node(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], registry: Contract
) -> None:
    holder, new_holder = accounts[1], accounts[7]
    add_three_nodes(w3, admin, registry, accounts[1:4])
    receipt = transact(w3, admin, registry, "transferFrom", holder.address, new_holder.address, 100)
    (log,) = logs_with(receipt, registry.address, "Transfer(address,address,uint256)")
    assert [bytes(t) for t in log["topics"][1:]] == [
        address_topic(holder.address),
        address_topic(new_holder.address),
        uint_topic(100),
    ]
    assert registry.functions.ownerOf(100).call() == new_holder.address
    assert registry.functions.getNode(100).call() == (
        100,
        signing_key(1),
        "https://node1.test",
        True,
    )
    # safeTransferFrom works for the owner too; a wrong `from` is still rejected.
    transact(
        w3,
        admin,
        registry,
        "safeTransferFrom(address,address,uint256)",
        new_holder.address,
        holder.address,
        100,
    )
    assert registry.functions.ownerOf(100).call() == holder.address
    with reverts_with("ERC721IncorrectOwner(address,uint256,address)"):
        transact(w3, admin, registry, "transferFrom", new_holder.address, holder.address, 100)


# --------------------------------------------------------------------------- payload contracts


@dataclass(frozen=True)
class PayloadKind:
    name: str
    add: str
    event: str
    topic_type: str  # bytes16 or bytes32

    def topic_id(self, n: int) -> bytes:
        size = 16 if self.topic_type == "bytes16" else 32
        return bytes([n]) * size

    def proxy(self, deployed: DeployedContracts) -> str:
        return deployed.group_messages if self.name == GROUP_MESSAGES else deployed.identity_updates


KINDS = [
    PayloadKind(GROUP_MESSAGES, "addMessage", "MessageSent(bytes16,bytes,uint64)", "bytes16"),
    PayloadKind(
        IDENTITY_UPDATES,
        "addIdentityUpdate",
        "IdentityUpdateCreated(bytes32,bytes,uint64)",
        "bytes32",
    ),
]


@pytest.fixture(params=KINDS, ids=lambda k: k.name)
def kind(request: pytest.FixtureRequest) -> PayloadKind:
    param: PayloadKind = request.param
    return param


@pytest.fixture
def payloads(w3: Web3, deployed: DeployedContracts, kind: PayloadKind) -> Contract:
    return contract_at(w3, kind.name, kind.proxy(deployed))


def assert_payload_event(
    receipt: TxReceipt, address: str, kind: PayloadKind, topic_id: bytes, payload: bytes, seq: int
) -> None:
    (log,) = logs_with(receipt, address, kind.event)
    assert len(log["topics"]) == 3
    # Indexed bytes16 is left-aligned in its topic; bytes32 fills it.
    assert bytes(log["topics"][1]) == topic_id.ljust(32, b"\x00")
    assert bytes(log["topics"][2]) == uint_topic(seq)
    assert abi_decode(["bytes"], bytes(log["data"])) == (payload,)


def test_event_abi_is_exact(kind: PayloadKind) -> None:
    events = {e["name"]: e for e in load_artifact(kind.name).abi if e["type"] == "event"}
    event = events[kind.event.split("(")[0]]
    assert [(i["name"], i["type"], i["indexed"]) for i in event["inputs"]] == [
        ("groupId" if kind.topic_type == "bytes16" else "inboxId", kind.topic_type, True),
        ("message" if kind.topic_type == "bytes16" else "update", "bytes", False),
        ("sequenceId", "uint64", True),
    ]
    upgrade = events["UpgradeAuthorized"]
    assert [(i["name"], i["type"], i["indexed"]) for i in upgrade["inputs"]] == [
        ("upgrader", "address", False),
        ("newImplementation", "address", False),
    ]


def test_sequence_ids_and_event_shape(
    w3: Web3, accounts: list[LocalAccount], payloads: Contract, kind: PayloadKind
) -> None:
    # Anyone may publish: use three non-admin senders.
    for seq, sender in enumerate(accounts[1:4], start=1):
        payload = os.urandom(100 * seq)
        receipt = transact(w3, sender, payloads, kind.add, kind.topic_id(seq), payload)
        assert_payload_event(receipt, payloads.address, kind, kind.topic_id(seq), payload, seq)
    assert payloads.functions.lastSequenceId().call() == 3
    # get_logs sees the three events in order.
    logs = w3.eth.get_logs(
        {"address": payloads.address, "fromBlock": 0, "topics": [HexBytes(topic(kind.event))]}
    )
    assert [int.from_bytes(bytes(log["topics"][2]), "big") for log in logs] == [1, 2, 3]


def test_payload_size_bounds(
    w3: Web3, accounts: list[LocalAccount], payloads: Contract, kind: PayloadKind
) -> None:
    sender = accounts[2]
    sig = "InvalidPayloadSize(uint256,uint256,uint256)"
    assert payloads.functions.MAX_PAYLOAD_SIZE().call() == MAX_PAYLOAD_SIZE
    with reverts_with(sig, 0, 1, MAX_PAYLOAD_SIZE):
        transact(w3, sender, payloads, kind.add, kind.topic_id(1), b"")
    with reverts_with(sig, MAX_PAYLOAD_SIZE + 1, 1, MAX_PAYLOAD_SIZE):
        transact(w3, sender, payloads, kind.add, kind.topic_id(1), os.urandom(MAX_PAYLOAD_SIZE + 1))
    receipt = transact(w3, sender, payloads, kind.add, kind.topic_id(1), b"\x01")
    assert_payload_event(receipt, payloads.address, kind, kind.topic_id(1), b"\x01", 1)
    big = os.urandom(MAX_PAYLOAD_SIZE)
    receipt = transact(w3, sender, payloads, kind.add, kind.topic_id(2), big)
    assert_payload_event(receipt, payloads.address, kind, kind.topic_id(2), big, 2)
    assert receipt["gasUsed"] < 2**24  # fits the Osaka per-transaction gas cap


def test_pause_and_unpause(
    w3: Web3,
    admin: LocalAccount,
    accounts: list[LocalAccount],
    payloads: Contract,
    kind: PayloadKind,
) -> None:
    user = accounts[3]
    transact(w3, user, payloads, kind.add, kind.topic_id(1), b"one")
    with reverts_with(
        "AccessControlUnauthorizedAccount(address,bytes32)", user.address, DEFAULT_ADMIN_ROLE
    ):
        transact(w3, user, payloads, "pause")
    receipt = transact(w3, admin, payloads, "pause")
    (log,) = logs_with(receipt, payloads.address, "Paused(address)")
    assert bytes(log["data"]) == abi_encode(["address"], [admin.address])
    assert payloads.functions.paused().call() is True
    with reverts_with("EnforcedPause()"):
        transact(w3, user, payloads, kind.add, kind.topic_id(1), b"two")
    with reverts_with(
        "AccessControlUnauthorizedAccount(address,bytes32)", user.address, DEFAULT_ADMIN_ROLE
    ):
        transact(w3, user, payloads, "unpause")
    transact(w3, admin, payloads, "unpause")
    assert payloads.functions.paused().call() is False
    receipt = transact(w3, user, payloads, kind.add, kind.topic_id(1), b"two")
    # The failed add while paused did not consume a sequence id.
    assert_payload_event(receipt, payloads.address, kind, kind.topic_id(1), b"two", 2)


def test_granted_admin_can_pause(
    w3: Web3, admin: LocalAccount, accounts: list[LocalAccount], payloads: Contract
) -> None:
    new_admin = accounts[4]
    transact(w3, admin, payloads, "grantRole", DEFAULT_ADMIN_ROLE, new_admin.address)
    transact(w3, new_admin, payloads, "pause")
    assert payloads.functions.paused().call() is True
    transact(w3, admin, payloads, "revokeRole", DEFAULT_ADMIN_ROLE, new_admin.address)
    with reverts_with(
        "AccessControlUnauthorizedAccount(address,bytes32)", new_admin.address, DEFAULT_ADMIN_ROLE
    ):
        transact(w3, new_admin, payloads, "unpause")


def test_initialize_only_once(
    w3: Web3,
    admin: LocalAccount,
    accounts: list[LocalAccount],
    deployed: DeployedContracts,
    kind: PayloadKind,
) -> None:
    attacker = accounts[5]
    proxy = contract_at(w3, kind.name, kind.proxy(deployed))
    impl_address = (
        deployed.group_messages_implementation
        if kind.name == GROUP_MESSAGES
        else deployed.identity_updates_implementation
    )
    implementation = contract_at(w3, kind.name, impl_address)
    for target in (proxy, implementation):
        with reverts_with("InvalidInitialization()"):
            transact(w3, attacker, target, "initialize", attacker.address)
    assert proxy.functions.hasRole(DEFAULT_ADMIN_ROLE, attacker.address).call() is False
    # A proxy initialized with the zero admin cannot be deployed.
    init = implementation.encode_abi("initialize", args=["0x" + "00" * 20])
    with reverts_with("ZeroAdminAddress()"):
        deploy(w3, admin, ERC1967_PROXY, impl_address, init)


def test_upgrade(
    w3: Web3,
    admin: LocalAccount,
    accounts: list[LocalAccount],
    deployed: DeployedContracts,
    payloads: Contract,
    kind: PayloadKind,
) -> None:
    user = accounts[6]
    for n in (1, 2):
        transact(w3, user, payloads, kind.add, kind.topic_id(n), b"before upgrade")
    new_impl = deploy(w3, admin, kind.name).address
    old_impl = implementation_of(w3, payloads.address)
    assert new_impl != old_impl

    with reverts_with(
        "AccessControlUnauthorizedAccount(address,bytes32)", user.address, DEFAULT_ADMIN_ROLE
    ):
        transact(w3, user, payloads, "upgradeToAndCall", new_impl, b"")
    # Not a UUPS implementation.
    with reverts_with("ERC1967InvalidImplementation(address)", deployed.node_registry):
        transact(w3, admin, payloads, "upgradeToAndCall", deployed.node_registry, b"")
    assert implementation_of(w3, payloads.address) == old_impl

    receipt = transact(w3, admin, payloads, "upgradeToAndCall", new_impl, b"")
    (authorized,) = logs_with(receipt, payloads.address, "UpgradeAuthorized(address,address)")
    assert bytes(authorized["data"]) == abi_encode(
        ["address", "address"], [admin.address, new_impl]
    )
    (upgraded,) = logs_with(receipt, payloads.address, "Upgraded(address)")
    assert bytes(upgraded["topics"][1]) == address_topic(new_impl)
    assert implementation_of(w3, payloads.address) == new_impl

    # State survives: counter, roles.
    assert payloads.functions.lastSequenceId().call() == 2
    assert payloads.functions.hasRole(DEFAULT_ADMIN_ROLE, admin.address).call() is True
    receipt = transact(w3, user, payloads, kind.add, kind.topic_id(3), b"after upgrade")
    assert_payload_event(receipt, payloads.address, kind, kind.topic_id(3), b"after upgrade", 3)


def test_contracts_count_sequence_ids_independently(
    w3: Web3, accounts: list[LocalAccount], deployed: DeployedContracts
) -> None:
    gm = contract_at(w3, GROUP_MESSAGES, deployed.group_messages)
    iu = contract_at(w3, IDENTITY_UPDATES, deployed.identity_updates)
    user = accounts[7]
    for _ in range(3):
        transact(w3, user, gm, "addMessage", bytes(16), b"m")
    receipt = transact(w3, user, iu, "addIdentityUpdate", bytes(32), b"u")
    assert_payload_event(receipt, iu.address, KINDS[1], bytes(32), b"u", 1)
    assert gm.functions.lastSequenceId().call() == 3


def test_gas_per_1kib_message(
    w3: Web3, accounts: list[LocalAccount], deployed: DeployedContracts
) -> None:
    gm = contract_at(w3, GROUP_MESSAGES, deployed.group_messages)
    user = accounts[8]
    first = transact(w3, user, gm, "addMessage", bytes(16), os.urandom(1024))["gasUsed"]
    steady = transact(w3, user, gm, "addMessage", bytes(16), os.urandom(1024))["gasUsed"]
    print(f"\naddMessage 1 KiB gas: first={first} steady={steady}")
    # First write to the counter slot costs a fresh SSTORE; later ones are cheaper.
    assert first > steady
    assert steady < 80_000
