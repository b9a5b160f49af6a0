"""The supervisor's merge of its workers' metrics: one family per name, each sample labelled
with the worker it came from; a worker that does not answer is left out of the scrape."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server
from prometheus_client.registry import CollectorRegistry

from xnode.devtools.postgres import free_port
from xnode.observability.metrics import MetricsServer
from xnode.observability.worker_metrics import WorkerMetrics


def _worker(published: float, stored: float, streams: int = 0) -> tuple[str, MetricsServer]:
    registry = CollectorRegistry()
    Counter("xnode_published", "Published", registry=registry).inc(published)
    Gauge("xnode_clock", "Clock", ["originator"], registry=registry).labels("100").set(stored)
    open_streams = Gauge("xnode_open_subscriptions", "Open", ["method"], registry=registry)
    open_streams.labels("SubscribeEnvelopes").set(streams)
    ended = Counter("xnode_subscriptions_ended", "Ended", ["method", "reason"], registry=registry)
    ended.labels("SubscribeEnvelopes", "fell_behind").inc(streams // 10)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    return f"127.0.0.1:{server.server_port}", MetricsServer(server, thread)


def test_samples_of_every_worker_are_merged_by_name_with_a_worker_label() -> None:
    first, first_server = _worker(3, 7)
    second, second_server = _worker(5, 9)
    gone = f"127.0.0.1:{free_port()}"  # a worker restarting: nothing listens
    try:
        merged = {
            m.name: m for m in WorkerMetrics(lambda: [(0, first), (1, second), (2, gone)]).collect()
        }
    finally:
        first_server.stop()
        second_server.stop()
    published = [
        (s.labels, s.value) for s in merged["xnode_published"].samples if s.name.endswith("_total")
    ]
    assert published == [({"worker": "0"}, 3.0), ({"worker": "1"}, 5.0)]
    clock = [(s.labels, s.value) for s in merged["xnode_clock"].samples]
    assert clock == [
        ({"originator": "100", "worker": "0"}, 7.0),
        ({"originator": "100", "worker": "1"}, 9.0),
    ]


def test_subscription_families_are_summed_over_the_workers() -> None:
    first, first_server = _worker(3, 7, streams=400)
    second, second_server = _worker(5, 9, streams=600)
    try:
        merged = {m.name: m for m in WorkerMetrics(lambda: [(0, first), (1, second)]).collect()}
    finally:
        first_server.stop()
        second_server.stop()
    open_streams = [(s.labels, s.value) for s in merged["xnode_open_subscriptions"].samples]
    assert open_streams == [({"method": "SubscribeEnvelopes"}, 1000.0)]
    ended = [(s.name, s.labels, s.value) for s in merged["xnode_subscriptions_ended"].samples]
    labels = {"method": "SubscribeEnvelopes", "reason": "fell_behind"}
    assert ended == [("xnode_subscriptions_ended_total", labels, 100.0)]
