"""Prometheus metrics, served on their own port."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

_FAST = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0, 2.0)

PUBLISH_LATENCY = Histogram(
    "xnode_publish_latency_seconds",
    "Publish request latency, receipt to durable answer",
    buckets=_FAST,
)
PUBLISH_REJECTED = Counter(
    "xnode_publish_rejected_total", "Payer envelopes refused, by reason", ["reason"]
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
OPEN_SUBSCRIPTIONS = Gauge("xnode_open_subscriptions", "Open subscription streams", ["method"])


def observe_batch(size: int, seconds: float) -> None:
    BATCH_SIZE.observe(size)
    COMMIT_LATENCY.observe(seconds)


def serve_metrics(address: str) -> None:
    host, _, port = address.rpartition(":")
    start_http_server(int(port), addr=host or "127.0.0.1")


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
AUTH_REFUSED = Counter(
    "xnode_node_auth_refused_total", "Node tokens refused on replication streams"
)
