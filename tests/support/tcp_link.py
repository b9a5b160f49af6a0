"""A TCP proxy a test controls, to cut a link between two processes as a network would."""

from __future__ import annotations

import asyncio
import contextlib


class Link:
    """A TCP proxy for one direction of one link. `set_cut(True)` drops its connections and
    refuses new ones; `set_cut(True, blackhole=True)` keeps them open and silent, as a network
    dropping every packet does; `set_cut(False)` heals (connections held silent are closed,
    as their ends would time out)."""

    def __init__(self) -> None:
        self.upstream = ""
        self.cut = False
        self.blackhole = False
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.address = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def set_cut(self, cut: bool, blackhole: bool = False) -> None:
        was_blackhole = self.blackhole
        self.cut, self.blackhole = cut, cut and blackhole
        if (cut and not blackhole) or was_blackhole:
            for writer in list(self._open):
                writer.close()

    @property
    def refusing(self) -> bool:
        return self.cut and not self.blackhole

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                if self.refusing:
                    break
                if not self.blackhole:
                    writer.write(data)
                    await writer.drain()
        writer.close()

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection opened into the blackhole: read and dropped until the heal."""
        self._open.add(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass
        self._open.discard(writer)
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blackhole:
            await self._hold(reader, writer)
            return
        if self.cut or not self.upstream:
            writer.close()
            return
        try:
            host, port = self.upstream.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the test's loop is ending: so is the connection
        finally:
            self._open -= {writer, up_writer}

    async def stop(self) -> None:
        self.set_cut(True)
        if self._server is not None:
            self._server.close()
