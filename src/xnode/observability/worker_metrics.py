"""One metrics port for a node of several worker processes: each scrape reads every worker's
own metrics (served on loopback) and serves them together, every sample labelled with its
worker (`worker="0"`, `worker="1"`, ...). Sum over `worker` for the node's figure."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from xnode.observability.metrics import MetricsServer, MetricsTls

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
        return merged.values()


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
