"""A process's children and descendants, from /proc (Linux), and the end of its log, for
benchmarks, devnet and tests; the devnet's way to start an xnode process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def child_pids(pid: int) -> list[int]:
    """Its child processes, whichever of its threads started them (each thread lists its
    own: a fork server started from a thread is not under the main thread's)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread or the process ended meanwhile
    return children


def descendant_pids(pid: int) -> list[int]:
    """Its children and theirs."""
    children = child_pids(pid)
    return children + [grandchild for child in children for grandchild in descendant_pids(child)]


def log_tail(log: Path, lines: int) -> str:
    """The last `lines` lines of a process's log, for a start or a test that failed."""
    if not log.exists():
        return f"({log} does not exist)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def spawn_xnode(command: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`xnode <command>` in its own session, so Ctrl-C reaches only whoever started it (the
    devnet, which stops its processes in order), appending its output to `log`: a process
    started again writes after what it wrote before."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "xnode.cli", command],
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
