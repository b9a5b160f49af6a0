"""Composition root of `xnode gateway`: registry, node channels, PayerApi and reads, health;
its bootstrap, listeners and stop order are the node's (xnode.server)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import structlog
from grpc_health.v1 import health, health_pb2

from xnode.api.calls import CallsPerCallerInterceptor
from xnode.api.http import GATEWAY_JSON_ROUTES, HttpApi, health_handler, methods_of
from xnode.api.proxies import ClientAddresses
from xnode.core.crypto import SigningKey
from xnode.core.registry import Registry
from xnode.gateway.channels import NodeChannels
from xnode.gateway.clients import ClientAuth, JwtPolicy
from xnode.gateway.limits import ClientLimits
from xnode.gateway.node_health import NodeHealth
from xnode.gateway.publish import Publisher
from xnode.gateway.reads import READ_SERVICES, Reads, read_handlers
from xnode.gateway.service import SERVICE, ClientPolicy, PayerService, payer_handlers
from xnode.gateway.settings import GatewaySettings
from xnode.gateway.usage import UsageLog
from xnode.observability.logging import configure_logging
from xnode.server.bootstrap import StartupError, open_chain, open_registry
from xnode.server.gauges import certificate_gauges
from xnode.server.serving import (
    GrpcServing,
    add_health_and_reflection,
    bind,
    grpc_server,
    serve_http_on,
    serve_metrics_on,
    until_signaled,
    warn_if_plaintext,
)
from xnode.server.stops import Phase, Stops
from xnode.tls import ClientTls, PeerTls, ServerTls, TlsConfigError
from xnode.usecases.admission import Admission
from xnode.usecases.limits import Caller, LocalBuckets
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)
# Registry listeners are synchronous; the channel clean-ups they start are kept alive here.
_background: set[asyncio.Task[None]] = set()


@dataclass
class Gateway:
    """A started gateway; `stop()` runs its stop steps in the one stop order
    (xnode.server.stops.STOP_ORDER)."""

    address: str
    registry: RegistrySource
    stops: Stops
    read_url: str | None = None  # what GetNodes names for reads; None: the nodes
    http_address: str | None = None  # gRPC-web and JSON, when http_listen_address is set
    metrics_address: str | None = None

    async def stop(self) -> None:
        log.info("gateway_stopping", address=self.address)
        await self.stops.run()
        log.info("gateway_stopped")


@dataclass(frozen=True)
class _Credentials:
    payer: SigningKey
    tokens: JwtPolicy | None
    served: ServerTls | None  # what the ports serve; None: plaintext
    nodes: PeerTls | None  # https:// nodes' CA and the client certificate; None: system roots


def _credentials(settings: GatewaySettings) -> _Credentials:
    try:
        key = settings.payer_signing_key()
    except (OSError, ValueError) as exc:
        raise StartupError(f"payer key: {exc}") from exc
    try:
        tokens = settings.client_jwt_policy()
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    try:
        towards_nodes = (
            settings.tls_ca_file,
            settings.tls_client_cert_file,
            settings.tls_client_key_file,
        )
        nodes = None
        if any(towards_nodes):
            shown = ClientTls.from_files(*towards_nodes)  # checks the files fit together
            client = ServerTls.from_files(
                settings.tls_client_cert_file, settings.tls_client_key_file
            )
            nodes = PeerTls(shown.root_certificates, client)  # read again when they change
        served = ServerTls.from_files(settings.tls_cert_file, settings.tls_key_file)
    except TlsConfigError as exc:
        raise StartupError(f"tls: {exc}") from exc
    return _Credentials(key, tokens, served, nodes)


async def _open_registry(settings: GatewaySettings, stops: Stops) -> RegistrySource:
    chain = await open_chain(settings, stops, wanted=settings.registry_source != "file")
    registry = await open_registry(settings, chain)
    if registry is None:
        raise StartupError(
            "the gateway needs a node registry: set nodes_file, or chain_rpc_url and contracts_file"
        )
    return registry


async def start_gateway(settings: GatewaySettings) -> Gateway:
    """Starts every part of the gateway; when a step fails, what started before it is
    released (channels and connections closed, tasks ended, ports freed) before the error
    propagates."""
    credentials = _credentials(settings)
    stops = Stops(settings.shutdown_grace_seconds + settings.stop_step_seconds)
    try:
        gateway = await _start(settings, credentials, stops)
    except BaseException:
        await stops.run()
        raise
    warn_if_plaintext(
        credentials.served, gateway.address, gateway.http_address, gateway.metrics_address
    )
    log.info(
        "gateway_listening",
        address=gateway.address,
        payer="0x" + credentials.payer.address.hex(),
        nodes=sorted(gateway.registry.current().nodes),
        reads=gateway.read_url or "from the nodes directly",
    )
    return gateway


async def _start(settings: GatewaySettings, credentials: _Credentials, stops: Stops) -> Gateway:
    # The process-wide counters (xnode_limited_total{api="gateway"}), labelled node_id 0.
    expiry = certificate_gauges(credentials.served)
    metrics_address = serve_metrics_on(settings.metrics_address, 0, expiry, None, stops)
    registry = await _open_registry(settings, stops)
    limit = settings.max_message_mib * 1024 * 1024
    channels = NodeChannels(
        limit,
        settings.node_down_seconds,
        credentials.nodes,
        settings.stream_connections_per_node,
    )
    stops.add(Phase.PEERS, channels.close)

    def registry_changed(new: Registry) -> None:
        task = asyncio.get_running_loop().create_task(channels.retain(new))
        _background.add(task)
        task.add_done_callback(_background.discard)

    registry.on_change(registry_changed)
    stops.add(Phase.REGISTRY, registry.stop)
    await registry.start()
    health_of_nodes = NodeHealth(
        registry,
        channels,
        settings.node_check_seconds,
        settings.node_check_timeout_seconds,
        failures_to_down=settings.node_check_failures,
        connect_timeout_s=settings.node_check_connect_timeout_seconds,
    )
    stops.add(Phase.PEERS, health_of_nodes.stop)
    addresses = ClientAddresses(settings.proxies_trusted())
    clients = ClientPolicy(
        ClientAuth(settings.client_api_keys(), credentials.tokens),
        ClientLimits(settings.client_limit_policy(), LocalBuckets()),
        UsageLog(settings.usage_file),
        addresses,
    )
    stops.add_sync(Phase.COMMITS, clients.usage.close)
    publisher = Publisher(
        registry,
        credentials.payer,
        channels,
        health_of_nodes,
        settings.publish_timeout_seconds,
        settings.message_retention_days,
        settings.chain_visibility_seconds,
    )
    reads = Reads(
        registry,
        channels,
        health_of_nodes,
        settings.read_timeout_seconds,
        settings.read_failover_seconds,
        addresses,
        auth=None if settings.anonymous_reads or not clients.auth.required else clients.auth,
    )
    connections = settings.connection_limits()
    calls = CallsPerCallerInterceptor(
        connections.grpc_calls_per_ip, lambda context: Caller(addresses.of(context))
    )
    server = grpc_server(settings.max_message_mib, [calls], connections=connections)
    address = bind(server, settings.listen_address, credentials.served)
    # Streams never end on their own: they would hold the grace. In-flight publishes finish
    # within it (the gateway admits every request: nothing is refused before the server stops).
    serving = GrpcServing(server, [reads.close], Admission(), settings.shutdown_grace_seconds)
    serving.stop_with(stops)
    read_url = settings.read_url_for(address, credentials.served is not None)
    payer = PayerService(registry, publisher, clients, read_url=read_url)
    server.add_generic_rpc_handlers([payer_handlers(payer)])
    server.add_generic_rpc_handlers(read_handlers(reads))
    health_servicer = add_health_and_reflection(server, [SERVICE, *READ_SERVICES])
    for name in ("", SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    stops.add_sync(Phase.HEALTH, health_servicer.enter_graceful_shutdown)
    # Browsers read over gRPC-web: GetNodes on the HTTP port names that port, which serves
    # the same reads with failover (or, reads through the gateway off, the nodes' HTTP ports).
    http_read_url = settings.http_read_url_for(credentials.served is not None)
    http_payer = PayerService(
        registry, publisher, clients, settings.node_http_urls, read_url=http_read_url
    )
    http_served = [payer_handlers(http_payer), *read_handlers(reads)]
    http_address = await _serve_http(settings, http_served, health_servicer, stops, credentials)
    await serving.start()
    health_of_nodes.start()
    return Gateway(address, registry, stops, read_url, http_address, metrics_address)


async def _serve_http(
    settings: GatewaySettings,
    served: list[grpc.GenericRpcHandler],
    health_servicer: health.HealthServicer,
    stops: Stops,
    credentials: _Credentials,
) -> str | None:
    handlers = [*served, health_handler(health_servicer)]
    limit = settings.max_message_mib * 1024 * 1024
    api = HttpApi(methods_of(handlers), GATEWAY_JSON_ROUTES, settings.cors_origins, limit)
    grace_s = settings.shutdown_grace_seconds
    listen = settings.http_listen_address
    connections = settings.connection_limits()
    return await serve_http_on(
        listen, api, grace_s, credentials.served, stops, connections=connections
    )


async def run_gateway(settings: GatewaySettings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    gateway = await start_gateway(settings)
    await until_signaled()
    await gateway.stop()
