"""A process's children and descendants, from /proc (Linux), for benchmarks and tests."""

from __future__ import annotations

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
