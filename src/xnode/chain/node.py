"""The chain side of a node, built from Settings: connection checks, registry reader,
indexer, publisher and inbox resolver. server.py wires these into the node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eth_account import Account

from xnode.chain.contracts import DeployedContracts
from xnode.chain.deployment import ContractsFileError, load_contracts_file
from xnode.chain.index_status import IndexerConfig
from xnode.chain.indexer import ChainIndexer, OnIndexed, OnRewound
from xnode.chain.ports import ChainStorage, IndexerLock
from xnode.chain.publisher import ChainPublisher
from xnode.chain.registry import ChainRegistrySource
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable
from xnode.chain.transactions import TxSender
from xnode.chain.verify import ChainSetupError, verify_deployment
from xnode.config import Settings
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor


@dataclass
class ChainConnection:
    rpc: ChainRpc
    contracts: DeployedContracts

    async def close(self) -> None:
        await self.rpc.close()


async def connect_chain(settings: Settings) -> ChainConnection:
    """Checks the RPC and the contracts file against each other; ChainSetupError otherwise."""
    assert settings.chain_rpc_url is not None and settings.contracts_file is not None
    try:
        contracts = load_contracts_file(settings.contracts_file)
    except ContractsFileError as exc:
        raise ChainSetupError(str(exc)) from exc
    rpc = ChainRpc(settings.chain_rpc_url, settings.chain_rpc_timeout_seconds)
    try:
        await verify_deployment(rpc, contracts)
    except BaseException:
        await rpc.close()
        raise
    return ChainConnection(rpc, contracts)


async def chain_registry(conn: ChainConnection, settings: Settings) -> ChainRegistrySource:
    try:
        return await ChainRegistrySource.open(
            conn.rpc,
            conn.contracts.node_registry,
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
) -> ChainServices:
    """The indexer and publisher over `store` (the store adapter's, built by the composition
    root); `lock` elects the one process per database that indexes."""
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
