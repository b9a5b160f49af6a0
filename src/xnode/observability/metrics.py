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
