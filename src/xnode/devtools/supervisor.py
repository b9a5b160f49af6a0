"""The devnet's nodes and gateway under a supervisor: one that exits is reported (which one,
how it ended, where its log is) and started again after a backoff, while the others go on
serving, as systemd or supervisord would do it.

The backoff grows from RESTART_INITIAL_S up to RESTART_MAX_S for a process that keeps failing,
and starts over once a process has stayed up STABLE_S, so a node killed once an hour comes
back within a second or two each time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xnode.core.backoff import Backoff

RESTART_INITIAL_S = 1.0
RESTART_MAX_S = 30.0
STABLE_S = 30.0  # up this long, it counts as started well: the next failure waits the least
STOP_TIMEOUT_S = 30.0  # a process still running this long after SIGTERM is killed

Spawn = Callable[[], "subprocess.Popen[bytes]"]


def how_it_ended(returncode: int) -> str:
    """`exited with code 1`, or `killed by SIGKILL` (Popen's negative return codes)."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


@dataclass
class Supervised:
    """One process of the devnet: `spawn` starts it (again) in its own session, writing
    `log`."""

    name: str
    log: Path
    spawn: Spawn
    process: subprocess.Popen[bytes]
    started_at: float
    backoff: Backoff = field(
        default_factory=lambda: Backoff(initial_s=RESTART_INITIAL_S, max_s=RESTART_MAX_S)
    )
    restart_at: float | None = None  # when it is down and waits to be started again

    @property
    def running(self) -> bool:
        return self.restart_at is None and self.process.poll() is None


class Supervisor:
    """Watches the devnet's processes; `say` prints what happens to them. With `restart`
    false a process that exits is left down."""

    def __init__(self, say: Callable[[str], None], restart: bool = True) -> None:
        self._say = say
        self._restart = restart
        self.members: list[Supervised] = []

    def start(self, name: str, log: Path, spawn: Spawn) -> Supervised:
        member = Supervised(name, log, spawn, spawn(), time.monotonic())
        self.members.append(member)
        return member

    def watch(self, now: float | None = None) -> None:
        """One look at every process: report the ones that exited, start the ones due."""
        now = time.monotonic() if now is None else now
        for member in self.members:
            if member.restart_at is None:
                returncode = member.process.poll()
                if returncode is not None:
                    self._exited(member, returncode, now)
            elif now >= member.restart_at:
                member.process = member.spawn()
                member.started_at, member.restart_at = now, None
                self._say(f"{member.name} started again (pid {member.process.pid})")

    def _exited(self, member: Supervised, returncode: int, now: float) -> None:
        _end_leftovers(member.process.pid)
        ended = f"{member.name} {how_it_ended(returncode)}; its log: {member.log}"
        if not self._restart:
            self._say(f"{ended}; left down (--no-restart)")
            member.restart_at = float("inf")
            return
        if now - member.started_at >= STABLE_S:
            member.backoff.reset()
        delay = member.backoff.next_delay()
        member.restart_at = now + delay
        self._say(f"{ended}; starting it again in {delay:.1f} s")

    def stop(self) -> None:
        """SIGTERM to every running process, then waits for each (they drain); one that
        does not end in STOP_TIMEOUT_S is killed."""
        running = [m.process for m in self.members if m.running]
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _end_leftovers(pid: int) -> None:
    """A process killed outright leaves its children (a verifier pool, a worker) behind in
    its session's process group, holding ports and database connections: they go too, as
    systemd ends a service's whole control group."""
    with contextlib.suppress(ProcessLookupError):  # nothing was left of it
        os.killpg(pid, signal.SIGKILL)
