"""Builds `xnode watchdog` from Settings: registry (file or chain, as a node would read it),
the chain for chain payloads, where reports go, metrics and logs; runs it until SIGINT or
SIGTERM (or one round with --once)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import structlog

from xnode.chain.node import connect_chain
from xnode.chain.receipts import Transactions
from xnode.chain.verify import ChainSetupError
from xnode.commands.watchdog import (
    AsClient,
    AsNode,
    NodeClients,
    ReportSink,
    Watchdog,
    WatchdogConfig,
    run_watchdog,
)
from xnode.commands.watchdog_withholding import OwnLogs
from xnode.config import Settings
from xnode.observability.logging import configure_logging
from xnode.observability.metrics import serve_metrics
from xnode.server.bootstrap import (
    NodeTls,
    StartupError,
    create_pool,
    open_registry,
    resolve_node_id,
)
from xnode.server.serving import until_signaled
from xnode.store.misbehavior import MisbehaviorStore
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)


class WatchdogError(RuntimeError):
    """The watchdog cannot start (exit code 2); the message says why."""


async def watch(settings: Settings, once: bool = False) -> None:
    if settings.watchdog_slow_seconds >= settings.watchdog_timeout_seconds:
        raise WatchdogError("watchdog_slow_seconds must be below watchdog_timeout_seconds")
    configure_logging(settings.log_level, settings.log_format)
    async with AsyncExitStack() as stack:
        chain = None
        if settings.chain_enabled:
            try:
                chain = await connect_chain(settings)
            except ChainSetupError as exc:
                raise WatchdogError(f"cannot reach the chain: {exc}") from None
            stack.push_async_callback(chain.close)
        try:
            registry = await open_registry(settings, chain)
        except StartupError as exc:
            raise WatchdogError(str(exc)) from None
        if registry is None:
            raise WatchdogError("no node registry: set nodes_file or the chain settings")
        await registry.start()
        stack.push_async_callback(registry.stop)
        clients = NodeClients(registry, NodeTls.from_settings(settings).peers.current())
        stack.push_async_callback(clients.close)
        own_id, sink = await _sink(settings, registry, clients, stack)
        if settings.metrics_address:
            stack.callback(serve_metrics(settings.metrics_address, own_id or 0).stop)
        transactions = Transactions(chain.rpc, chain.contracts) if chain else None
        config = WatchdogConfig.from_settings(settings)
        own_logs = _own_logs(settings, registry, clients, own_id)
        watchdog = Watchdog(registry, clients, sink, config, own_id, transactions, own_logs)
        log.info("watchdog_started", beside=own_id, chain=chain is not None)
        stop = asyncio.Event()
        signaled = asyncio.create_task(until_signaled(stop))
        try:
            await run_watchdog(watchdog, settings.watchdog_interval_seconds, stop, once)
        finally:
            signaled.cancel()
        log.info("watchdog_stopped")


async def _sink(
    settings: Settings, registry: RegistrySource, clients: NodeClients, stack: AsyncExitStack
) -> tuple[int | None, ReportSink]:
    """(the node the watchdog runs beside, or None; where its reports go)."""
    if not settings.watchdog_as_node:
        return None, AsClient(registry, clients, settings.watchdog_report_copies)
    try:
        key = settings.signing_key()
        own_id = resolve_node_id(settings, key, registry)
    except (ValueError, StartupError) as exc:
        raise WatchdogError(f"watchdog_as_node needs this node's registered key: {exc}") from None
    pool = await create_pool(settings)
    stack.push_async_callback(pool.close)
    return own_id, AsNode(MisbehaviorStore(pool, key))


def _own_logs(
    settings: Settings, registry: RegistrySource, clients: NodeClients, own_id: int | None
) -> OwnLogs:
    """As a client, only proofs are filed: nodes take no WITHHOLDING_ACCUSATION from one, and
    its questions, signed by no registry key, carry no time (only time-free claims prove)."""
    as_node = settings.watchdog_as_node and own_id is not None
    patience = settings.withholding_patience_seconds if as_node else None
    asker = (own_id, settings.signing_key()) if as_node and own_id is not None else None
    return OwnLogs(
        lambda: registry.current().public_keys(),
        lambda node_id: clients.get(node_id).channel,
        patience,
        asker,
    )
