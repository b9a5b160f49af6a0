"""The listeners of a node or a gateway (gRPC, gRPC-web and JSON over HTTP, metrics), how
they are bound, and the gRPC server's drain; each registers its stop step where it starts."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from xnode.api.http import HttpApi, serve_http
from xnode.config import DEFAULT_CONNECTIONS, ConnectionLimits
from xnode.observability.metrics import MetricsTls, ScrapedGauge, serve_metrics
from xnode.server.bootstrap import StartupError
from xnode.server.stops import Phase, Stops
from xnode.tls import ServerTls, TlsConfigError
from xnode.usecases.admission import Admission
from xnode.usecases.health import HealthMonitor

log = structlog.get_logger(__name__)


def grpc_server(
    max_message_mib: int,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    reuse_port: bool = False,
    connections: ConnectionLimits = DEFAULT_CONNECTIONS,
) -> grpc.aio.Server:
    """`reuse_port`: the node's worker processes share the port; the kernel spreads
    connections. A connection that never finishes its handshake, or holds no call for
    `connections.idle_s`, is closed (silent connections cost a file descriptor and memory
    each). No maximum connection age: it would end long-lived subscriptions and replication
    streams."""
    limit = max_message_mib * 1024 * 1024
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.server_handshake_timeout_ms", int(connections.handshake_s * 1000)),
        ("grpc.max_connection_idle_ms", int(connections.idle_s * 1000)),
    ]
    if reuse_port:
        options.append(("grpc.so_reuseport", 1))
    return grpc.aio.server(interceptors=list(interceptors), options=options)


def add_health_and_reflection(
    server: grpc.aio.Server, services: Sequence[str]
) -> health.HealthServicer:
    """The standard health service, and reflection over `services` and itself."""
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(CheckOnTheLoop(servicer), server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflection.enable_server_reflection([*services, health_name, reflection.SERVICE_NAME], server)
    return servicer


class CheckOnTheLoop(health_pb2_grpc.HealthServicer):
    """The health servicer with Check answered on the event loop. grpc.aio runs a handler
    that is not a coroutine function in a thread pool, a hop there and back that cost more
    than the rest of an empty call (docs/benchmarks.md "Per call"); Check only reads a dict
    under a lock that is never held long, so it need not leave the loop. Watch is the
    servicer's own (List, as the servicer's, the generated UNIMPLEMENTED), and the health
    monitor keeps writing to the servicer."""

    def __init__(self, servicer: health.HealthServicer) -> None:
        self._servicer = servicer

    def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> Any:
        return self._servicer.Watch(request, context)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: Any
    ) -> health_pb2.HealthCheckResponse:
        # `context` is grpc.aio's; the servicer's Check calls only its set_code (NOT_FOUND),
        # which it shares with the synchronous context the servicer is typed for.
        reply: health_pb2.HealthCheckResponse = self._servicer.Check(request, context)
        return reply


def bind(server: grpc.aio.Server, listen_address: str, tls: ServerTls | None) -> str:
    """The address as bound (port 0: the one the system chose). StartupError, said in one
    line, when the port is taken or the address is not this host's."""
    try:
        if tls is None:
            port = server.add_insecure_port(listen_address)
        else:
            port = server.add_secure_port(listen_address, tls.credentials())
    except RuntimeError:  # grpc's "Failed to bind": it says no more than that
        port = 0
    if port == 0:
        raise StartupError(
            f"cannot listen on {listen_address}: the port is in use, or the address is not "
            "one of this host's"
        )
    return f"{listen_address.rpartition(':')[0]}:{port}"


async def serve_http_on(
    listen_address: str,
    api: HttpApi,
    grace_s: float,
    tls: ServerTls | None,
    stops: Stops,
    reuse_port: bool = False,
    connections: ConnectionLimits = DEFAULT_CONNECTIONS,
) -> str | None:
    """gRPC-web and JSON on `listen_address` (empty: off), with the gRPC port's certificate
    (plaintext with it); the address as bound."""
    if not listen_address:
        return None
    try:
        context = tls.reloading_ssl_context() if tls is not None else None
        http = await serve_http(api, listen_address, grace_s, context, reuse_port, connections)
    except TlsConfigError as exc:
        raise StartupError(str(exc)) from exc
    except OSError as exc:
        raise StartupError(f"cannot listen on {listen_address}: {exc}") from exc
    stops.add(Phase.LISTENERS, http.stop)
    return http.address


def serve_metrics_on(
    address: str,
    node_id: int,
    gauges: Sequence[ScrapedGauge],
    tls: MetricsTls | None,
    stops: Stops,
) -> str | None:
    """Prometheus metrics on `address` (empty: off); the address as bound."""
    if not address:
        return None
    try:
        metrics = serve_metrics(address, node_id, gauges, tls)
    except OSError as exc:
        raise StartupError(f"cannot serve metrics on {address}: {exc}") from exc
    stops.add_sync(Phase.LISTENERS, metrics.stop)
    return metrics.address


def metrics_tls(tls: ServerTls | None) -> MetricsTls | None:
    if tls is None:
        return None
    return MetricsTls(
        tls.cert_file,
        tls.key_file,
        tls.client_ca_file,
        tls.require_client_cert,
        tls.reloading_sni(),
    )


def warn_if_plaintext(
    tls: ServerTls | None, address: str, http: str | None, metrics: str | None
) -> None:
    if tls is None:
        log.warning(
            "plaintext_listener",
            grpc=address,
            http=http or None,
            metrics=metrics or None,
            detail="no TLS: for local development only; set tls_cert_file and tls_key_file",
        )


async def until_signaled(stop: asyncio.Event | None = None) -> None:
    """Returns on SIGTERM or SIGINT, or once `stop` (which the signals set too) is set by
    another cause. The handlers stay: a second signal during the drain that follows is
    absorbed, not the default exit."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


@dataclass
class GrpcServing:
    """The gRPC server's start and its drain: new publishes are refused with UNAVAILABLE and
    live subscriptions end (new ones are refused) with UNAVAILABLE at once; publishes already
    accepted finish with their answers within the grace; then, once callers have gone quiet
    (xnode.usecases.admission: gRPC's stop cancels requests no handler has taken yet), the
    server stops."""

    server: grpc.aio.Server
    end_streams: Sequence[Callable[[], None]]  # subscriptions and log follows
    admission: Admission
    grace_s: float
    started: bool = False
    _deadline: float | None = None  # loop time the drain must end by, once it has begun

    def stop_with(self, stops: Stops) -> None:
        """Its drain's first half among the first steps (before the HTTP port closes, which
        is registered after this), the server's stop among the listeners."""
        stops.add(Phase.ACCEPTING, self.quiesce)
        stops.add(Phase.LISTENERS, self.stop)

    async def start(self) -> None:
        await self.server.start()
        self.started = True

    async def quiesce(self) -> float:
        """The drain's first half, for both ports: refuse and end, then wait for callers to
        go quiet. Runs before the HTTP port closes, so HTTP publishes are refused with an
        answer too instead of meeting a closed connection. Returns the drain's deadline."""
        if self._deadline is not None:
            return self._deadline
        loop = asyncio.get_running_loop()
        self._deadline = deadline = loop.time() + self.grace_s
        self.admission.close()
        for end in self.end_streams:
            end()
        if self.started and not await self.admission.drained(self.grace_s):
            log.warning(
                "drain_grace_exceeded", in_flight=self.admission.in_flight, grace_s=self.grace_s
            )
        return deadline

    async def stop(self) -> None:
        deadline = await self.quiesce()
        if not self.started:
            # A grpc.aio server that bound its port but never started holds the port until
            # it has started and stopped.
            await self.server.start()
        remaining = deadline - asyncio.get_running_loop().time()
        await self.server.stop(max(remaining, 0.0))


@dataclass(frozen=True)
class NodeHealth:
    monitor: HealthMonitor
    servicer: health.HealthServicer

    async def drain(self) -> None:
        """Every service NOT_SERVING from now on."""
        await self.monitor.drain()
        self.servicer.enter_graceful_shutdown()
