"""The node registry from a JSON file, for private deployments and development.

The file is re-read when it changes, so nodes can be added or disabled without a restart."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import structlog

from xnode.registry import Registry, RegistryListener

log = structlog.get_logger(__name__)


class StaticRegistrySource:
    def __init__(self, path: Path, poll_s: float = 2.0) -> None:
        self._path = path
        self._poll_s = poll_s
        self._registry = Registry.from_json(path.read_text())
        self._mtime = path.stat().st_mtime_ns
        self._listeners: list[RegistryListener] = []
        self._task: asyncio.Task[None] | None = None

    def current(self) -> Registry:
        return self._registry

    def on_change(self, listener: RegistryListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="static-registry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                mtime = self._path.stat().st_mtime_ns
                if mtime == self._mtime:
                    continue
                registry = Registry.from_json(self._path.read_text())
            except (OSError, ValueError, KeyError) as exc:
                log.warning("nodes_file_unreadable", path=str(self._path), error=str(exc))
                continue
            self._mtime, self._registry = mtime, registry
            log.info("registry_changed", source=str(self._path), nodes=len(registry.nodes))
            for listener in self._listeners:
                listener(registry)
