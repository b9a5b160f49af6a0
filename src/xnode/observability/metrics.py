"""Prometheus metrics, served on their own port.

Every xnode_* series carries a `node` label with the node id. It is added when the metrics
are served (NodeLabelled), not at each call site: the metrics are process-wide, and several
nodes started in one process (tests) share them."""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from xnode.observability.build_info import build_info

PREFIX = "xnode_"

_FAST = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0, 2.0)

PUBLISH_LATENCY = Histogram(
    "xnode_publish_latency_seconds",
    "Publish request latency, receipt to durable answer",
    buckets=_FAST,
)
LIMITED = Counter(
    "xnode_limited_total",
    "Requests refused by the API limits (XIP-49 3.2.5), by API and what was over its limit",
    ["api", "kind"],
)
REQUESTS_REJECTED = Counter(
    "xnode_requests_rejected_total",
    "Requests refused, by API (publish, query, replication, misbehavior), method and reason",
    ["api", "method", "reason"],
)
BATCH_SIZE = Histogram(
    "xnode_publish_batch_envelopes",
    "Envelopes per group-commit batch",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
COMMIT_LATENCY = Histogram(
    "xnode_publish_commit_seconds", "Time to sign and commit one batch", buckets=_FAST
)
ENVELOPES_STORED = Counter(
    "xnode_envelopes_stored_total", "Envelopes stored, by originator", ["originator"]
)
READS_ROUTED = Counter(
    "xnode_reads_routed_total",
    "Envelope queries and catch-up pages, by the database that served them (replica, primary)",
    ["to"],
)
OPEN_SUBSCRIPTIONS = Gauge("xnode_open_subscriptions", "Open subscription streams", ["method"])
SUBSCRIPTION_DELIVERIES = Counter(
    "xnode_subscription_deliveries_total",
    "Envelopes handed to subscription streams (one per envelope and stream), by method",
    ["method"],
)
SUBSCRIPTIONS_ENDED = Counter(
    "xnode_subscriptions_ended_total",
    "Subscription streams the node ended, by method and reason (fell_behind: the stream left"
    " envelopes waiting too long; draining: the node stops)",
    ["method", "reason"],
)
REQUEST_LATENCY = Histogram(
    "xnode_request_seconds",
    "Unary request latency, receipt to answer (refusals included), by API and method",
    ["api", "method"],
    buckets=_FAST,
)


def observe_batch(size: int, seconds: float) -> None:
    BATCH_SIZE.observe(size)
    COMMIT_LATENCY.observe(seconds)


class NodeLabelled(Collector):
    """The metrics of `source`, with node=<node_id> added to every xnode_* sample."""

    def __init__(self, node_id: int, source: CollectorRegistry = REGISTRY) -> None:
        self._node = str(node_id)
        self._source = source

    def collect(self) -> Iterable[Metric]:
        for metric in self._source.collect():
            if metric.name.startswith(PREFIX):
                metric.samples = [
                    Sample(s.name, {**s.labels, "node": self._node}, *s[2:]) for s in metric.samples
                ]
            yield metric


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    def stop(self) -> None:
        """Frees the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host!s}:{port}"


@dataclass(frozen=True)
class MetricsTls:
    """The metrics port over HTTPS: the node's certificate and key files, and the CA client
    certificates are checked against (required, or checked when given)."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    require_client_cert: bool = False
    # An SSLContext sni_callback that serves renewed files (xnode.tls.ServedFiles).
    reload: Callable[[Any, str | None, ssl.SSLContext], None] | None = None


# What a ScrapedGauge reads: (label values, value) pairs.
Reading = Callable[[], Iterable[tuple[Sequence[str], float]]]


class ScrapedGauge(Collector):
    """A gauge read from the node when scraped: the node's own state (its vector clock, its
    pool) is served as it is, with nothing to keep current on the hot paths, and per node even
    when several nodes share a process."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], read: Reading):
        self._name = name
        self._documentation = documentation
        self._labels = list(labels)
        self._read = read

    def describe(self) -> Iterable[Metric]:
        """Its name without reading it: registering one reads nothing yet."""
        yield GaugeMetricFamily(self._name, self._documentation, labels=self._labels)

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labels)
        for values, value in self._read():
            family.add_metric(list(values), value)
        yield family


def _build_info() -> Iterable[tuple[Sequence[str], float]]:
    info = build_info()
    return [((info.version, info.commit), 1.0)]


# Which release and commit serve, on every metrics endpoint (node, gateway, watchdog): a
# rolling upgrade shows as two series of it across the network.
REGISTRY.register(
    ScrapedGauge(
        "xnode_build_info",
        "Always 1; the labels name the xnode version and the git commit it was built from",
        ["version", "commit"],
        _build_info,
    )
)


def resident_memory() -> Iterable[tuple[Sequence[str], float]]:
    """This process's resident set (Linux); nothing elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return []
    return [((), float(pages * os.sysconf("SC_PAGE_SIZE")))]


def serve_metrics(
    address: str, node_id: int, gauges: Sequence[Collector] = (), tls: MetricsTls | None = None
) -> MetricsServer:
    """The process-wide metrics and this node's `gauges`, all labelled with the node id;
    over HTTPS with `tls`."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeLabelled(node_id))
    own = CollectorRegistry(auto_describe=False)
    for gauge in gauges:
        own.register(gauge)
    registry.register(NodeLabelled(node_id, own))
    server, thread = start_http_server(
        int(port),
        addr=host or "127.0.0.1",
        registry=registry,
        certfile=tls.cert_file if tls else None,
        keyfile=tls.key_file if tls else None,
        client_cafile=tls.client_ca_file if tls else None,
        client_auth_required=bool(tls and tls.client_ca_file and tls.require_client_cert),
    )
    if tls is not None and tls.reload is not None and isinstance(server.socket, ssl.SSLSocket):
        server.socket.context.sni_callback = tls.reload
    return MetricsServer(server, thread)


# --- replication (XIP-49 3.2) ---------------------------------------------------------------

REPLICATION_LAG_SEQUENCE_IDS = Gauge(
    "xnode_replication_lag_sequence_ids",
    "Sequence ids a peer (originator) has that this node has not stored yet",
    ["originator"],
)
REPLICATION_LAG_SECONDS = Gauge(
    "xnode_replication_lag_seconds",
    "Age of the newest stored envelope of an originator while newer ones exist; 0 caught up",
    ["originator"],
)
REPLICATION_RECEIVED = Counter(
    "xnode_replication_envelopes_received_total",
    "Envelopes received from peers and stored (duplicates excluded), by originator",
    ["originator"],
)
REPLICATION_REJECTED = Counter(
    "xnode_replication_envelopes_rejected_total",
    "Envelopes received from peers and refused, by originator and reason",
    ["originator", "reason"],
)
REPLICATION_RECONNECTS = Counter(
    "xnode_replication_stream_reconnects_total",
    "Peer streams reopened after they ended or failed, by serving peer and mode",
    ["peer", "mode"],
)
REPLICATION_STREAMS = Gauge(
    "xnode_replication_streams", "Open peer streams, by mode (direct, fallback)", ["mode"]
)
MISBEHAVIOR_REPORTS = Counter(
    "xnode_misbehavior_reports_total",
    "Misbehavior reports stored, by type and source (node, client)",
    ["type", "source"],
)
LIVENESS_REPORTS_WITHHELD = Counter(
    "xnode_liveness_reports_withheld_total",
    "Liveness reports not filed because this node's own database was down or just back",
    ["type"],
)
HTTP_CONNECTIONS_REFUSED = Counter(
    "xnode_http_connections_refused_total",
    "Connections to the HTTP port closed as they opened: their client IP held "
    "http_connections_per_ip already",
)
GRPC_CALLS_REFUSED = Counter(
    "xnode_grpc_calls_refused_total",
    "gRPC calls refused as they started: their client IP (or peer node) had "
    "grpc_calls_per_ip calls in progress already",
)
AUTH_REFUSED = Counter(
    "xnode_node_auth_refused_total", "Node tokens refused on replication streams"
)

REPAIR_ENVELOPES = Counter(
    "xnode_repair_envelopes_total",
    "Envelopes anti-entropy repair dealt with, by originator and outcome (stored, expired,"
    " lost: held here as a leaf only before its committed expiry and asked for, restored:"
    " of those, fetched and stored; rejected, unproven, fork)",
    ["originator", "outcome"],
)
SCRUB_ENVELOPES = Counter(
    "xnode_scrub_leaves_total",
    "Leaves the scrub checked, by what was held for each (matches, mismatch: stored bytes"
    " the leaf does not commit to, withdrawn; lost: no envelope before the leaf's committed"
    " expiry, handed to repair; expired; format_1: no envelope, nothing provable)",
    ["outcome"],
)
SCRUB_PASSES = Counter("xnode_scrub_passes_total", "Passes the scrub finished over every leaf")
REPAIR_ROUND_TRIPS = Counter(
    "xnode_repair_round_trips_total",
    "Fingerprint round trips of anti-entropy repair, by peer",
    ["peer"],
)
GATEWAY_NODE_CHECKS = Counter(
    "xnode_gateway_node_checks_total",
    "The gateway's health checks of each node, by outcome (serving, missed: no answer in time, "
    "refused: another failure, not_serving)",
    ["node", "outcome"],
)

GATEWAY_READ_FAILOVERS = Counter(
    "xnode_gateway_read_failovers_total",
    "Reads the gateway took off a node and sent to the next one, by method, node and cause "
    "(a status code, health_check, check_failed, ended)",
    ["method", "node", "cause"],
)


# --- xnode watchdog (XIP-49 3.2.7) ------------------------------------------------------------

WATCHDOG_PROBES = Counter(
    "xnode_watchdog_probes_total",
    "Watchdog probes of a node's client APIs, by probed node, API (health, query) and status",
    ["probed", "api", "status"],
)
WATCHDOG_PROBE_SECONDS = Histogram(
    "xnode_watchdog_probe_seconds",
    "Watchdog probe latency, by API (health, query); unanswered probes count the timeout",
    ["api"],
    buckets=(*_FAST, 4.0, 8.0, 16.0),
)
WATCHDOG_REPORTS = Counter(
    "xnode_watchdog_reports_total",
    "Misbehavior reports the watchdog filed, by type and accused node",
    ["type", "accused"],
)
WATCHDOG_WITHHELD_ROUNDS = Counter(
    "xnode_watchdog_withheld_rounds_total",
    "Rounds whose liveness reports were withheld: every probed node failed (the watchdog's "
    "own network is the likelier fault)",
)
RETENTION_RUNS = Counter(
    "xnode_retention_runs_total",
    "Scheduled retention runs (envelope partitions added ahead, expired ones dropped, a"
    " retention plan applied), by outcome (done; skipped: another process held the lock;"
    " failed: tried again at the next run)",
    ["outcome"],
)
ENVELOPE_PARTITIONS = Counter(
    "xnode_envelope_partitions_total",
    "Envelope table partitions the retention runs changed, by change (added, dropped)",
    ["change"],
)
