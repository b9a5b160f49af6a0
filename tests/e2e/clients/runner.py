"""Runs a client scenario in a process of its own.

libxmtp keeps worker threads (device sync, disappearing messages, retries) alive after its
client objects are dropped; in the test process they would outlive the test and keep
calling a torn-down network for the rest of the session. A spawned process takes them with
it when it exits. Only this child imports the bindings."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tests.e2e.clients.network_view import NetworkView


def run(name: str, view: NetworkView, control: Connection, directory: str) -> None:
    """The spawned process: reports ("done", seconds) or ("failed", traceback)."""
    started = time.monotonic()
    try:
        from tests.e2e.clients import scenarios

        scenario: Any = getattr(scenarios, name)
        asyncio.run(scenario(view, Path(directory)))
    except BaseException:
        control.send(("failed", traceback.format_exc()))
        code = 1
    else:
        control.send(("done", time.monotonic() - started))
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the library's threads end with the process, not before
