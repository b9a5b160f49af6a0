"""What a start-up or a stop may leave behind in this process: running tasks, bound ports,
TCP connections (to Postgres, anvil, the nodes); and the failure a test injects into a
start-up step to see it."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_ESTABLISHED = "01"


class Injected(Exception):
    """The failure injected into a start-up step."""


async def boom(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected start-up failure")


def boom_sync(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected start-up failure")


def running_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if not t.done()}


def new_tasks(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks running now that were not before, the caller's own excepted."""
    return running_tasks() - before - {asyncio.current_task()}


def port_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


def bound(addresses: Iterable[str]) -> list[str]:
    """Those of `addresses` (host:port, empty ones skipped) that some socket still holds."""
    return [a for a in addresses if a and not port_free(a)]


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def connections_to(ports: Iterable[int]) -> int:
    """This process's established TCP connections to any of `ports`."""
    wanted, own = set(ports), _own_socket_inodes()
    count = 0
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/self/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rpartition(":")[2], 16)
            if fields[3] == _ESTABLISHED and remote_port in wanted and fields[9] in own:
                count += 1
    return count
