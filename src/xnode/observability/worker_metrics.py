"""One metrics port for a node of several worker processes: each scrape reads every worker's
own metrics (served on loopback) and serves them together, every sample labelled with its
worker (`worker="0"`, `worker="1"`, ...). Sum over `worker` for the node's figure.

The subscription families (`NODE_SUMS`) are served already summed over the workers, without
a `worker` label: a node's subscribers are spread over its workers by the kernel, and what an
operator watches is the node's open streams, deliveries and ended streams, the same series
with one worker or several."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from xnode.observability.metrics import MetricsServer, MetricsTls

NODE_SUMS = frozenset(
    {"xnode_open_subscriptions", "xnode_subscription_deliveries", "xnode_subscriptions_ended"}
)

# A scrape waits this long for a worker; one that does not answer is left out of it.
WORKER_SCRAPE_TIMEOUT_S = 2.0


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=WORKER_SCRAPE_TIMEOUT_S) as r:
        return str(r.read().decode())


class WorkerMetrics(Collector):
    """The families of every worker, merged by name, with worker=<index> on each sample."""

    def __init__(self, addresses: Callable[[], Sequence[tuple[int, str]]]) -> None:
        self._addresses = addresses  # (worker index, host:port) of the workers serving now

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for index, address in self._addresses():
            try:
                text = _scrape(address)
            except OSError:
                continue  # a worker restarting: its samples are missing from this scrape
            for family in text_string_to_metric_families(text):
                into = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                into.samples += [
                    Sample(s.name, {**s.labels, "worker": str(index)}, *s[2:])
                    for s in family.samples
                ]
        for name in NODE_SUMS & merged.keys():
            merged[name].samples = _summed(merged[name].samples)
        return merged.values()


def _summed(samples: list[Sample]) -> list[Sample]:
    """The samples added up over their workers (creation times dropped: no sum of them)."""
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for s in samples:
        if not s.name.endswith("_created"):
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "worker"))
            totals[(s.name, labels)] = totals.get((s.name, labels), 0.0) + s.value
    return [Sample(name, dict(labels), value) for (name, labels), value in totals.items()]


def serve_worker_metrics(
    address: str,
    workers: Callable[[], Sequence[tuple[int, str]]],
    tls: MetricsTls | None = None,
) -> MetricsServer:
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerMetrics(workers))
    server, thread = start_http_server(
        int(port),
        addr=host or "127.0.0.1",
        registry=registry,
        certfile=tls.cert_file if tls else None,
        keyfile=tls.key_file if tls else None,
        client_cafile=tls.client_ca_file if tls else None,
        client_auth_required=bool(tls and tls.client_ca_file and tls.require_client_cert),
    )
    return MetricsServer(server, thread)
