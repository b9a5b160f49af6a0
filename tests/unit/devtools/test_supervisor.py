"""The devnet's supervisor on real short-lived processes: it says which one ended, how and
where its log is, starts it again after a backoff that grows and starts over once a process
stayed up, and leaves it down with --no-restart."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import wait_until
from xnode.devtools.supervisor import (
    RESTART_INITIAL_S,
    STABLE_S,
    Supervised,
    Supervisor,
    how_it_ended,
)


def exits_with(code: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])


def sleeps() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )


def ended(member: Supervised) -> bool:
    return member.process.poll() is not None


def test_how_it_ended_names_the_code_or_the_signal() -> None:
    assert how_it_ended(3) == "exited with code 3"
    assert how_it_ended(-signal.SIGKILL) == "killed by SIGKILL"
    assert how_it_ended(-200) == "killed by signal 200"


def test_a_process_that_exits_is_reported_and_started_again_after_a_backoff() -> None:
    said: list[str] = []
    supervisor = Supervisor(said.append)
    member = supervisor.start("node-200", Path("/state/node-200.log"), lambda: exits_with(3))
    first = member.process
    wait_until(lambda: ended(member), what="the process exiting")
    supervisor.watch(now=member.started_at + 1)

    assert said[0].startswith("node-200 exited with code 3; its log: /state/node-200.log;")
    assert member.restart_at is not None
    assert not member.running
    delay = member.restart_at - (member.started_at + 1)
    assert RESTART_INITIAL_S / 2 <= delay <= RESTART_INITIAL_S

    supervisor.watch(now=member.restart_at - 0.01)
    assert member.process is first, "not before its time"
    supervisor.watch(now=member.restart_at)
    assert member.process is not first
    assert said[-1] == f"node-200 started again (pid {member.process.pid})"

    # It fails again at once: the next wait is longer.
    wait_until(lambda: ended(member), what="the restarted process exiting")
    supervisor.watch(now=member.started_at + 0.5)
    assert member.restart_at is not None
    assert member.restart_at - (member.started_at + 0.5) >= RESTART_INITIAL_S


def test_the_backoff_starts_over_once_a_process_stayed_up() -> None:
    supervisor = Supervisor(lambda _: None)
    member = supervisor.start("gateway", Path("gateway.log"), lambda: exits_with(1))
    member.backoff.attempts = 5  # it had failed often before
    wait_until(lambda: ended(member), what="the process exiting")
    supervisor.watch(now=member.started_at + STABLE_S)
    assert member.restart_at is not None
    assert member.restart_at - (member.started_at + STABLE_S) <= RESTART_INITIAL_S


def test_no_restart_leaves_it_down_and_stop_ends_the_others() -> None:
    said: list[str] = []
    supervisor = Supervisor(said.append, restart=False)
    down = supervisor.start("node-100", Path("node-100.log"), sleeps)
    up = supervisor.start("node-200", Path("node-200.log"), sleeps)
    down.process.send_signal(signal.SIGKILL)
    wait_until(lambda: ended(down), what="the killed process ending")
    supervisor.watch(now=down.started_at + 3600)
    supervisor.watch(now=down.started_at + 7200)
    assert said == ["node-100 killed by SIGKILL; its log: node-100.log; left down (--no-restart)"]
    assert up.running

    supervisor.stop()
    assert up.process.returncode == -signal.SIGTERM
