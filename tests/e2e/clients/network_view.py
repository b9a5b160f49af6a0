"""What a client scenario knows of the network: addresses, keys, metrics, which nodes are
alive, and a way to ask the test process to kill one. Picklable, so the scenario can run in
its own process (see runner.py)."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class NetworkView:
    addresses: dict[int, str]
    metrics: dict[int, str]
    public_keys: dict[int, bytes]
    gateway_urls: list[str]
    live: set[int] = field(default_factory=set)
    control: Connection | None = None

    def node_url(self, node_id: int) -> str:
        return f"http://{self.addresses[node_id]}"

    def live_addresses(self) -> dict[int, str]:
        return {n: a for n, a in self.addresses.items() if n in self.live}

    def kill(self, node_id: int) -> None:
        """The test process owns the node processes: it kills this one and answers."""
        assert self.control is not None, "no test process to ask"
        self.control.send(("kill", node_id))
        reply = self.control.recv()
        assert reply == ("killed", node_id), reply
        self.live.discard(node_id)

    def freeze(self, node_id: int) -> None:
        """SIGSTOP: the node holds its connections and answers nothing (a hung host)."""
        self._ask("freeze", node_id)
        self.live.discard(node_id)

    def thaw(self, node_id: int) -> None:
        self._ask("thaw", node_id)
        self.live.add(node_id)

    def restart(self, node_id: int) -> None:
        """Starts a killed node again on its database and address, and waits until it serves."""
        self._ask("restart", node_id)
        self.live.add(node_id)

    def _ask(self, kind: str, node_id: int) -> None:
        assert self.control is not None, "no test process to ask"
        self.control.send((kind, node_id))
        reply = self.control.recv()
        assert reply == (f"{kind}:done", node_id), reply

    def open_client_streams(self) -> dict[int, float]:
        """Client subscription streams open on each live node (from its metrics)."""
        counts = {}
        for node_id in self.live:
            url = f"http://{self.metrics[node_id]}/metrics"
            with urllib.request.urlopen(url, timeout=5) as reply:
                text = reply.read().decode()
            counts[node_id] = sum(
                sample.value
                for family in text_string_to_metric_families(text)
                if family.name == "xnode_open_subscriptions"
                for sample in family.samples
                if sample.labels.get("method") == "SubscribeEnvelopes"
            )
        return counts
