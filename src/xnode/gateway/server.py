"""Composition root of `xnode gateway`: registry, node channels, PayerApi, health."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from xnode.api.http import (
    GATEWAY_JSON_ROUTES,
    HttpApi,
    HttpServer,
    health_handler,
    methods_of,
    serve_http,
)
from xnode.chain.node import ChainConnection, connect_chain
from xnode.chain.verify import ChainSetupError
from xnode.core.registry import Registry
from xnode.gateway.channels import NodeChannels
from xnode.gateway.clients import ClientAuth
from xnode.gateway.limits import ClientLimits
from xnode.gateway.node_health import NodeHealth
from xnode.gateway.publish import Publisher
from xnode.gateway.reads import READ_SERVICES, Reads, read_handlers
from xnode.gateway.service import SERVICE, ClientPolicy, PayerService, payer_handlers
from xnode.gateway.settings import GatewaySettings
from xnode.gateway.usage import UsageLog
from xnode.observability.logging import configure_logging
from xnode.observability.metrics import MetricsServer, serve_metrics
from xnode.server.bootstrap import StartupError, open_registry
from xnode.tls import ClientTls, ServerTls, TlsConfigError
from xnode.usecases.limits import LocalBuckets
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)
# Registry listeners are synchronous; the channel clean-ups they start are kept alive here.
_background: set[asyncio.Task[None]] = set()


@dataclass
class Gateway:
    address: str
    server: grpc.aio.Server
    health: health.HealthServicer
    registry: RegistrySource
    channels: NodeChannels
    chain: ChainConnection | None
    grace_s: float
    http: HttpServer | None = None  # gRPC-web and JSON, when http_listen_address is set
    usage: UsageLog | None = None  # what it paid for, per client and day
    metrics: MetricsServer | None = None
    node_health: NodeHealth | None = None
    reads: Reads | None = None

    @property
    def http_address(self) -> str | None:
        return self.http.address if self.http is not None else None

    async def stop(self) -> None:
        log.info("gateway_stopping", address=self.address)
        self.health.enter_graceful_shutdown()
        if self.reads is not None:
            self.reads.close()  # streams never end on their own: they would hold the grace
        if self.http is not None:
            await self.http.stop()
        await self.server.stop(self.grace_s)  # in-flight publishes finish within the grace
        await self.registry.stop()
        if self.node_health is not None:
            await self.node_health.stop()
        await self.channels.close()
        if self.chain is not None:
            await self.chain.close()
        if self.usage is not None:
            self.usage.close()
        if self.metrics is not None:
            self.metrics.stop()
        log.info("gateway_stopped")


async def _open_registry(
    settings: GatewaySettings,
) -> tuple[RegistrySource, ChainConnection | None]:
    node_settings = settings.node_settings()
    if bool(settings.chain_rpc_url) != (settings.contracts_file is not None):
        raise StartupError("the chain needs both chain_rpc_url and contracts_file")
    chain = None
    if node_settings.chain_enabled and settings.registry_source != "file":
        try:
            chain = await connect_chain(node_settings)
        except ChainSetupError as exc:
            raise StartupError(str(exc)) from exc
    try:
        registry = await open_registry(node_settings, chain)
    except BaseException:
        if chain is not None:
            await chain.close()
        raise
    if registry is None:
        raise StartupError(
            "the gateway needs a node registry: set nodes_file, or chain_rpc_url and contracts_file"
        )
    return registry, chain


async def start_gateway(settings: GatewaySettings) -> Gateway:
    try:
        key = settings.payer_signing_key()
    except (OSError, ValueError) as exc:
        raise StartupError(f"payer key: {exc}") from exc
    try:
        tokens = settings.client_jwt_policy()
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    registry, chain = await _open_registry(settings)
    limit = settings.max_message_mib * 1024 * 1024
    try:
        tls = ClientTls.from_files(settings.tls_ca_file) if settings.tls_ca_file else None
        served = ServerTls.from_files(settings.tls_cert_file, settings.tls_key_file)
    except TlsConfigError as exc:
        raise StartupError(f"tls: {exc}") from exc
    channels = NodeChannels(limit, settings.node_down_seconds, tls)

    def registry_changed(new: Registry) -> None:
        task = asyncio.get_running_loop().create_task(channels.retain(new))
        _background.add(task)
        task.add_done_callback(_background.discard)

    registry.on_change(registry_changed)
    await registry.start()
    health_of_nodes = NodeHealth(
        registry, channels, settings.node_check_seconds, settings.node_check_timeout_seconds
    )
    publisher = Publisher(
        registry,
        key,
        channels,
        health_of_nodes,
        settings.publish_timeout_seconds,
        settings.message_retention_days,
        settings.chain_visibility_seconds,
    )
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    )
    clients = ClientPolicy(
        ClientAuth(settings.client_api_keys(), tokens),
        ClientLimits(settings.client_limit_policy(), LocalBuckets()),
        UsageLog(settings.usage_file),
    )
    port = (
        server.add_secure_port(settings.listen_address, served.credentials())
        if served is not None
        else server.add_insecure_port(settings.listen_address)
    )
    if port == 0:
        await registry.stop()
        raise StartupError(f"cannot listen on {settings.listen_address}")
    address = f"{settings.listen_address.rpartition(':')[0]}:{port}"
    read_url = settings.read_url_for(address, served is not None)
    payer = payer_handlers(PayerService(registry, publisher, clients, read_url=read_url))
    server.add_generic_rpc_handlers([payer])
    reads = Reads(
        registry,
        channels,
        health_of_nodes,
        settings.read_timeout_seconds,
        settings.read_failover_seconds,
    )
    server.add_generic_rpc_handlers(read_handlers(reads))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [
            SERVICE,
            *READ_SERVICES,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    try:
        # Browsers read over gRPC-web, which the gateway does not serve for reads (yet): GetNodes
        # on the HTTP port keeps naming the nodes.
        service = PayerService(registry, publisher, clients, settings.node_http_urls)
        http_payer = payer_handlers(service)
        http = await _serve_http(settings, [http_payer, health_handler(health_servicer)], served)
    except BaseException:
        await registry.stop()
        raise
    try:
        # The process-wide counters (xnode_limited_total{api="gateway"}), labelled node_id 0.
        metrics = serve_metrics(settings.metrics_address, 0) if settings.metrics_address else None
    except OSError as exc:
        await registry.stop()
        raise StartupError(f"cannot serve metrics on {settings.metrics_address}: {exc}") from exc
    await server.start()
    health_of_nodes.start()
    if served is None:
        log.warning(
            "plaintext_listener",
            grpc=address,
            http=http.address if http is not None else None,
            detail="no TLS: for local development only; set tls_cert_file and tls_key_file",
        )
    log.info(
        "gateway_listening",
        address=address,
        payer="0x" + key.address.hex(),
        nodes=sorted(registry.current().nodes),
        reads=read_url or "from the nodes directly",
    )
    return Gateway(
        address,
        server,
        health_servicer,
        registry,
        channels,
        chain,
        settings.shutdown_grace_seconds,
        http,
        clients.usage,
        metrics,
        health_of_nodes,
        reads,
    )


async def _serve_http(
    settings: GatewaySettings,
    handlers: list[grpc.GenericRpcHandler[Any, Any]],
    tls: ServerTls | None,
) -> HttpServer | None:
    """gRPC-web and JSON on http_listen_address, over the gRPC server's own handlers, with
    the gRPC port's certificate (plaintext with it)."""
    if not settings.http_listen_address:
        return None
    api = HttpApi(
        methods_of(handlers),
        GATEWAY_JSON_ROUTES,
        settings.cors_origins,
        settings.max_message_mib * 1024 * 1024,
    )
    try:
        context = tls.ssl_context() if tls is not None else None
        return await serve_http(
            api, settings.http_listen_address, settings.shutdown_grace_seconds, context
        )
    except TlsConfigError as exc:
        raise StartupError(f"tls: {exc}") from exc
    except OSError as exc:
        raise StartupError(f"cannot listen on {settings.http_listen_address}: {exc}") from exc


async def run_gateway(settings: GatewaySettings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    gateway = await start_gateway(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await gateway.stop()
