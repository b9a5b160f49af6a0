"""Fixtures for contract tests against a real anvil (installed by `npm ci`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.types import RPCEndpoint

from xnode.chain.anvil import AnvilNotInstalledError, AnvilProcess, find_anvil_binary, start_anvil
from xnode.chain.contracts import DeployedContracts, deploy_all
from xnode.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def anvil() -> Iterator[AnvilProcess]:
    """A fresh anvil (automine) for the session. Fails, never skips, when anvil is missing."""
    try:
        binary = find_anvil_binary(REPO_ROOT, Settings().anvil_bin)
    except AnvilNotInstalledError as exc:
        missing = str(exc)
    else:
        missing = ""
    if missing:
        pytest.fail(
            f"{missing}\nThe chain tests need the pinned anvil: run `npm ci` in {REPO_ROOT}.",
            pytrace=False,
        )
    process = start_anvil(binary=binary)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def w3(anvil: AnvilProcess) -> Web3:
    web3 = Web3(Web3.HTTPProvider(anvil.url, request_kwargs={"timeout": 30}))
    assert web3.is_connected()
    return web3


@pytest.fixture(scope="session")
def accounts(anvil: AnvilProcess) -> list[LocalAccount]:
    return [Account.from_key(key) for key in anvil.private_keys]


@pytest.fixture(scope="session")
def admin(accounts: list[LocalAccount]) -> LocalAccount:
    """Deployer: NodeRegistry owner and DEFAULT_ADMIN_ROLE holder."""
    return accounts[0]


@pytest.fixture(scope="session")
def session_deployment(w3: Web3, admin: LocalAccount) -> DeployedContracts:
    return deploy_all(w3, admin)


@pytest.fixture
def deployed(w3: Web3, session_deployment: DeployedContracts) -> Iterator[DeployedContracts]:
    """The session's contracts, with chain state rolled back after each test (evm_snapshot)."""
    snapshot = w3.provider.make_request(RPCEndpoint("evm_snapshot"), [])["result"]
    try:
        yield session_deployment
    finally:
        reverted = w3.provider.make_request(RPCEndpoint("evm_revert"), [snapshot])["result"]
        assert reverted is True, "evm_revert failed; later tests would see this test's state"
