"""Where the node learns who the nodes are, followed over time: a static file or the chain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

from xnode.core.registry import Registry

RegistryListener = Callable[[Registry], None]


class RegistrySource(Protocol):
    """Where the node learns who the nodes are: a static file, or the chain's NodeRegistry."""

    def current(self) -> Registry: ...

    def on_change(self, listener: RegistryListener) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class WatchedRegistry:
    """A registry source that follows its origin in a background task (`_watch`) and tells
    listeners about each new registry (`_replace`)."""

    task_name = "registry"

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._listeners: list[RegistryListener] = []
        self._task: asyncio.Task[None] | None = None

    def current(self) -> Registry:
        return self._registry

    def on_change(self, listener: RegistryListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        raise NotImplementedError

    def _replace(self, registry: Registry) -> None:
        self._registry = registry
        for listener in self._listeners:
            listener(registry)
