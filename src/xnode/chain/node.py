"""The chain side of a node, built from Settings: connection checks, registry reader,
indexer, publisher and inbox resolver. xnode.server wires these into the node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eth_account import Account

from xnode.chain.contracts import DeployedContracts
from xnode.chain.deployment import ContractsFileError, load_contracts_file, load_registry_file
from xnode.chain.index_status import IndexerConfig
from xnode.chain.indexer import ChainIndexer, OnIndexed, OnRewound
from xnode.chain.ports import ChainStorage, ChainVouchers, IndexerLock
from xnode.chain.publisher import ChainPublisher
from xnode.chain.registry import ChainRegistrySource
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable
from xnode.chain.transactions import TxSender
from xnode.chain.verify import ChainSetupError, verify_deployment, verify_registry
from xnode.config import RegistryGroup, Settings
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor


@dataclass
class ChainConnection:
    """The app chain (payload contracts) and, when it is apart (XIP: the registry on L1),
    the registry's chain."""

    rpc: ChainRpc
    contracts: DeployedContracts
    registry_rpc: ChainRpc | None = None
    registry_address: str | None = None

    @property
    def registry(self) -> tuple[ChainRpc, str]:
        """The RPC and address the NodeRegistry is read from."""
        if self.registry_rpc is None or self.registry_address is None:
            return self.rpc, self.contracts.node_registry
        return self.registry_rpc, self.registry_address

    async def close(self) -> None:
        await self.rpc.close()
        if self.registry_rpc is not None:
            await self.registry_rpc.close()


async def connect_chain(settings: RegistryGroup) -> ChainConnection:
    """Checks the RPC and the contracts file against each other (and the registry chain's,
    when it is apart); ChainSetupError otherwise."""
    assert settings.chain_rpc_url is not None and settings.contracts_file is not None
    try:
        contracts = load_contracts_file(settings.contracts_file)
    except ContractsFileError as exc:
        raise ChainSetupError(str(exc)) from exc
    apart = settings.registry_chain_apart
    rpc = ChainRpc(settings.chain_rpc_url, settings.chain_rpc_timeout_seconds)
    try:
        await verify_deployment(rpc, contracts, registry=not apart)
        if not apart:
            return ChainConnection(rpc, contracts)
        registry_rpc, address = await _connect_registry(settings)
    except BaseException:
        await rpc.close()
        raise
    return ChainConnection(rpc, contracts, registry_rpc, address)


async def _connect_registry(settings: RegistryGroup) -> tuple[ChainRpc, str]:
    """The registry chain: registry_rpc_url and registry_contracts_file, each defaulting to
    the app chain's setting."""
    path = settings.registry_contracts_file or settings.contracts_file
    url = settings.registry_rpc_url or settings.chain_rpc_url
    assert path is not None and url is not None
    try:
        chain_id, address = load_registry_file(path)
    except ContractsFileError as exc:
        raise ChainSetupError(str(exc)) from exc
    rpc = ChainRpc(url, settings.chain_rpc_timeout_seconds)
    try:
        await verify_registry(rpc, chain_id, address)
    except BaseException:
        await rpc.close()
        raise
    return rpc, address


async def chain_registry(conn: ChainConnection, settings: RegistryGroup) -> ChainRegistrySource:
    rpc, address = conn.registry
    try:
        return await ChainRegistrySource.open(
            rpc,
            address,
            poll_s=max(settings.chain_poll_seconds, 1.0),
            refresh_s=settings.chain_registry_refresh_seconds,
        )
    except (ChainUnavailable, ChainRpcError, ValueError) as exc:
        raise ChainSetupError(f"cannot read the node registry: {exc}") from exc


@dataclass
class ChainServices:
    connection: ChainConnection
    store: ChainStorage
    indexer: ChainIndexer
    publisher: ChainPublisher
    running: bool = False

    async def start(self) -> None:
        await self.indexer.start()
        self.running = True

    async def stop(self) -> None:
        self.running = False
        await self.indexer.stop()
        await self.connection.close()

    def unhealthy_reason(self) -> str | None:
        """For the health monitor: why chain publishes cannot be served now, or None."""
        if not self.running:
            return "the chain indexer is stopped"
        return self.indexer.status.unavailable_reason()


def chain_services(
    conn: ChainConnection,
    settings: Settings,
    store: ChainStorage,
    lock: IndexerLock,
    key: SigningKey,
    on_indexed: OnIndexed,
    on_rewound: OnRewound,
    node_cursor: Callable[[], Cursor],
    vouchers: ChainVouchers | None = None,
) -> ChainServices:
    """The indexer and publisher over `store` (the store adapter's, built by the composition
    root); `lock` elects the one process per database that indexes; `vouchers` (read-only
    nodes) give registered nodes' proofs for what it indexes."""
    config = IndexerConfig(
        confirmations=settings.chain_confirmations,
        poll_s=settings.chain_poll_seconds,
        page_blocks=settings.chain_page_blocks,
        max_lag_blocks=settings.chain_max_lag_blocks,
        rpc_timeout_s=settings.chain_rpc_timeout_seconds,
    )
    indexer = ChainIndexer(
        conn.rpc,
        store,
        conn.contracts,
        key,
        config,
        on_indexed,
        on_rewound,
        lock,
        vouchers=vouchers,
    )
    account = Account.from_key(settings.chain_publisher_signing_key().secret)
    sender = TxSender(conn.rpc, account, conn.contracts.chain_id)
    publisher = ChainPublisher(
        conn.rpc,
        store,
        indexer.status,
        conn.contracts,
        sender,
        node_cursor,
        timeout_s=settings.chain_publish_timeout_seconds,
        usage=store,
    )
    return ChainServices(conn, store, indexer, publisher)
