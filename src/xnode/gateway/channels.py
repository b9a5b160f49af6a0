"""gRPC channels to the nodes, made on first use and closed when the registry drops or moves
the node: one per node URL for calls, and `stream_connections` more for the streams it
carries for its clients, each on its own connection. A node of several worker processes has
its connections spread over them by the kernel (SO_REUSEPORT), not its streams: on one
connection, every client's stream would land on one worker."""

from __future__ import annotations

import time

import grpc
import structlog

from xnode.client.node import CHANNEL_OPTIONS
from xnode.core.registry import Registry
from xnode.tls import PeerTls

log = structlog.get_logger(__name__)


class UnusableUrl(ValueError):
    pass


def grpc_target(url: str) -> tuple[str, bool]:
    """host:port and whether TLS is on, from a registry URL ("http://h:p", "https://h:p")."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    if scheme not in ("http", "https", "grpc", "grpcs"):
        raise UnusableUrl(f"unsupported scheme {scheme!r} in node URL {url!r}")
    host = rest.rstrip("/")
    if not host:
        raise UnusableUrl(f"node URL {url!r} has no host")
    return host, scheme in ("https", "grpcs")


class NodeChannels:
    def __init__(
        self,
        max_message_bytes: int,
        down_s: float,
        tls: PeerTls | None = None,
        stream_connections: int = 1,
    ) -> None:
        self._tls = tls or PeerTls(None)
        self._made_with = self._tls.current()
        self._retired: list[grpc.aio.Channel] = []  # made with a client certificate since renewed
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            *[o for o in CHANNEL_OPTIONS if not o[0].startswith("grpc.max_")],
        ]
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._streams: dict[str, list[grpc.aio.Channel]] = {}
        self._turn: dict[str, int] = {}
        self._stream_connections = stream_connections
        self._down_until: dict[int, float] = {}
        self._down_s = down_s

    def channel(self, url: str) -> grpc.aio.Channel:
        self._renew()
        channel = self._channels.get(url)
        if channel is None:
            channel = self._channels[url] = self._open(url, [])
        return channel

    def stream_channel(self, url: str) -> grpc.aio.Channel:
        """One of the node's stream channels, in turn (each connects on its first stream)."""
        self._renew()
        channels = self._streams.get(url)
        if channels is None:
            # A subchannel pool each: channels to one target otherwise share a connection.
            own_pool = [("grpc.use_local_subchannel_pool", 1)]
            channels = [self._open(url, own_pool) for _ in range(self._stream_connections)]
            self._streams[url] = channels
        turn = self._turn.get(url, 0)
        self._turn[url] = turn + 1
        return channels[turn % len(channels)]

    def _renew(self) -> None:
        """After the client certificate's files change, new calls go over new channels that
        show the renewed one; calls on the old channels go on, which close with the rest."""
        current = self._tls.current()
        if current is self._made_with:
            return
        self._made_with = current
        for url in self._channels.keys() | self._streams.keys():
            self._retired.extend(self._dropped(url))

    def _open(self, url: str, extra: list[tuple[str, int]]) -> grpc.aio.Channel:
        target, secure = grpc_target(url)
        options = [*self._options, *extra]
        if secure:
            return grpc.aio.secure_channel(target, self._made_with.credentials(), options)
        return grpc.aio.insecure_channel(target, options)

    def mark_down(self, node_id: int) -> None:
        """Remembers an outage for a while, so the next requests try that node last rather
        than waiting on it first."""
        self._down_until[node_id] = time.monotonic() + self._down_s

    def mark_up(self, node_id: int) -> None:
        self._down_until.pop(node_id, None)

    def recently_down(self, node_id: int) -> bool:
        return self._down_until.get(node_id, 0.0) > time.monotonic()

    async def retain(self, registry: Registry) -> None:
        """Closes channels to URLs the registry no longer names."""
        urls = {n.http_address for n in registry.nodes.values() if n.enabled}
        for url in [u for u in self._channels.keys() | self._streams.keys() if u not in urls]:
            for channel in self._dropped(url):
                await channel.close(None)
            log.info("gateway_channel_closed", url=url)

    async def close(self) -> None:
        for url in self._channels.keys() | self._streams.keys():
            self._retired.extend(self._dropped(url))
        for channel in self._retired:
            await channel.close(None)
        self._retired.clear()

    def _dropped(self, url: str) -> list[grpc.aio.Channel]:
        own = self._channels.pop(url, None)
        self._turn.pop(url, None)
        return [*([own] if own is not None else []), *self._streams.pop(url, [])]
