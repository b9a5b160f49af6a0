"""Binding the gRPC port: a port another process holds stops the start-up with one line that
says which address, never a traceback."""

from __future__ import annotations

import socket

import grpc
import pytest

from xnode.server.bootstrap import StartupError
from xnode.server.serving import bind


async def test_a_taken_port_is_a_startup_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        server = grpc.aio.server()
        try:
            with pytest.raises(
                StartupError, match=f"cannot listen on {address}: the port is in use"
            ):
                bind(server, address, None)
        finally:
            await server.stop(None)


async def test_a_free_port_is_bound_and_named() -> None:
    server = grpc.aio.server()
    try:
        address = bind(server, "127.0.0.1:0", None)
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
    finally:
        await server.stop(None)
