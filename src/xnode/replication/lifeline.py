"""Worker processes that die with the node that started them, however it dies (SIGKILL too).

A process pool's workers never notice their node's death on their own: each waits on a call
queue whose pipe it holds both ends of, and a fork server's children are not even the node's
children, so PR_SET_PDEATHSIG cannot help. Left alone they, and the fork server and resource
tracker whose "alive" pipes they hold, run forever with parent pid 1.

So the node keeps the write end of a pipe it never writes to and hands the read end to every
worker; a thread in each worker waits on it. The kernel closes the write end when the node
dies, the read end sees EOF and the thread exits the worker. Once the node and its workers
are gone, the fork server and the resource tracker see EOF on their own pipes and exit.

This module is imported by the workers: it must stay free of the daemon's imports.
"""

from __future__ import annotations

import contextlib
import os
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection

# The exit code of a worker whose node is gone (nobody reads it: the node is dead).
ORPHANED = 70


class Lifeline:
    """The node's side: pass `reader` to each worker (pickled with a multiprocessing
    context, it crosses as a file descriptor) and keep this object as long as the
    workers should live. The write end is not inheritable: no other child holds it."""

    def __init__(self) -> None:
        self.reader, self._writer = Pipe(duplex=False)

    def cut(self) -> None:
        """Ends every worker holding `reader` (also done by the kernel when the node dies)."""
        self._writer.close()


def watch(reader: Connection) -> None:
    """A pool initializer: the worker exits as soon as the node holding the Lifeline is
    gone, even in the middle of a task (its result has nobody left to go to)."""
    threading.Thread(target=_exit_at_eof, args=(reader,), name="lifeline", daemon=True).start()


def _exit_at_eof(reader: Connection) -> None:
    with contextlib.suppress(EOFError, OSError):
        reader.recv_bytes()  # nothing is ever sent: returns only by EOFError
    os._exit(ORPHANED)  # at once: no atexit hooks, no waiting for the call queue
