"""The node registry from a JSON file, for private deployments and development.

The file is re-read when it changes, so nodes can be added or disabled without a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from xnode.core.registry import Registry
from xnode.usecases.registry_source import WatchedRegistry

log = structlog.get_logger(__name__)


class StaticRegistrySource(WatchedRegistry):
    task_name = "static-registry"

    def __init__(self, path: Path, poll_s: float = 2.0) -> None:
        super().__init__(Registry.from_json(path.read_text()))
        self._path = path
        self._poll_s = poll_s
        self._mtime = path.stat().st_mtime_ns

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
            self._mtime = mtime
            log.info("registry_changed", source=str(self._path), nodes=len(registry.nodes))
            self._replace(registry)
