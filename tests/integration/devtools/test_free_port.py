"""free_port hands out ports below the kernel's ephemeral range, where no outgoing connection
can take one before its server binds it, and never the same one twice."""

from __future__ import annotations

import socket
from pathlib import Path

from xnode.devtools.postgres import free_port


def test_ports_are_below_the_ephemeral_range_free_and_never_repeated() -> None:
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert max(ports) < first_ephemeral
    for port in ports[:20]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # still free
