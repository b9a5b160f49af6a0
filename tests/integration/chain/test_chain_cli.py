"""`xnode chain deploy | add-node | set-node-status | registry-snapshot` as an operator runs
them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ChainEnv
from xnode.chain import abi
from xnode.chain.anvil import rpc_call
from xnode.core.crypto import SigningKey
from xnode.core.registry_history import RegistryHistory


def _xnode(chain: ChainEnv, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "XNODE_CHAIN_RPC_URL": chain.url,
        "XNODE_CHAIN_OWNER_KEY": chain.anvil.private_keys[0],
    }
    return subprocess.run(
        [sys.executable, "-m", "xnode.cli", "chain", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _nodes(chain: ChainEnv, registry: str) -> list[tuple[int, bytes, str, bool]]:
    data = rpc_call(
        chain.url, "eth_call", [{"to": registry, "data": "0x" + abi.ALL_NODES.hex()}, "latest"]
    )
    return abi.decode_all_nodes_raw(bytes.fromhex(str(data)[2:]))


def test_deploy_add_node_and_set_status(chain_env: ChainEnv, tmp_path: Path) -> None:
    contracts = tmp_path / "deployed.json"
    deployed = _xnode(chain_env, "deploy", "--out", str(contracts))
    assert deployed.returncode == 0, deployed.stderr
    written = json.loads(contracts.read_text())
    assert written["chain_id"] == 31337 and written["deployment_block"] > 0
    key_file = tmp_path / "node.key"
    key = SigningKey.generate()
    key_file.write_text(key.hex())
    added = _xnode(
        chain_env,
        "add-node",
        "--contracts-file",
        str(contracts),
        "--signer-key-file",
        str(key_file),
        "--http-address",
        "http://n1:5050",
        "--fund-eth",
        "2",
    )
    assert added.returncode == 0, added.stderr
    assert "node_id=100" in added.stdout
    status = _xnode(
        chain_env,
        "set-node-status",
        "--contracts-file",
        str(contracts),
        "--node-id",
        "100",
        "disabled",
    )
    assert status.returncode == 0, status.stderr
    assert _nodes(chain_env, written["node_registry"]) == [
        (100, key.public_key, "http://n1:5050", False)
    ]
    balance = rpc_call(chain_env.url, "eth_getBalance", ["0x" + key.address.hex(), "latest"])
    assert int(str(balance), 16) == 2 * 10**18

    # The council's registry: the contract's history, with block times (no owner key needed).
    snapshot = tmp_path / "registry.json"
    env = {k: v for k, v in os.environ.items() if k != "XNODE_CHAIN_OWNER_KEY"}
    taken = subprocess.run(
        [sys.executable, "-m", "xnode.cli", "chain", "registry-snapshot", "--rpc-url",
         chain_env.url, "--contracts-file", str(contracts), "--out", str(snapshot)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr
    assert f"wrote {snapshot}: 1 nodes" in taken.stdout
    history = RegistryHistory.from_json(snapshot.read_text())
    [(node_id, node)] = history.nodes.items()
    assert (node_id, node.public_key, history.node_registry) == (
        100,
        key.public_key,
        written["node_registry"],
    )
    [(disabled_s, enabled)] = node.status_changes
    assert not enabled and node.added_s <= disabled_s <= history.block_time_s
    assert not node.enabled_at(history.block_time_s * 10**9)


def test_errors_are_one_line(chain_env: ChainEnv, tmp_path: Path) -> None:
    missing = _xnode(
        chain_env,
        "set-node-status",
        "--contracts-file",
        str(tmp_path / "none.json"),
        "--node-id",
        "100",
        "enabled",
    )
    assert missing.returncode == 1
    assert "cannot read contracts file" in missing.stderr
    assert "Traceback" not in missing.stderr
