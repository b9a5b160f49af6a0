"""The executors that verify replicated envelopes: worker threads for every batch too large
to verify on the event loop, and worker processes for bulk batches (repair), started once
the node runs. Built by the composition root and handed to the replication worker, which
owns no executor of its own."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import structlog

from xnode.core import verification
from xnode.core.verification import ready
from xnode.replication import lifeline

log = structlog.get_logger(__name__)


class BulkVerifiers(ProcessPoolExecutor):
    """Worker processes for bulk verification that die with this process, however it dies
    (xnode.replication.lifeline): a node killed with SIGKILL leaves none behind. A fork
    server starts them (forking the daemon itself, with gRPC's threads running, is unsafe),
    having imported only the verifier and the lifeline."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([verification.__name__, lifeline.__name__])
        self._lifeline = lifeline.Lifeline()  # held as long as the pool
        super().__init__(
            processes,
            mp_context=context,
            initializer=lifeline.watch,
            initargs=(self._lifeline.reader,),
        )


def start_bulk(pool: ProcessPoolExecutor, processes: int) -> None:
    """Starts the pool's processes now rather than on the first repair. Blocks while the
    fork server starts: call it in a thread."""
    started = [pool.submit(ready) for _ in range(processes)]  # each starts one: none idle
    for future in started:
        future.result()


class Verifiers:
    """`threads` worker threads, and `processes` worker processes once `start_bulk` ran
    (0: bulk batches go to the threads). Threads verifying thousands of envelopes contend
    for the GIL (the Python around each recovery is a large share of it); processes use
    every core."""

    def __init__(self, threads: int, processes: int = 0) -> None:
        self.threads = threads
        self.processes = processes
        self.thread_pool: Executor = ThreadPoolExecutor(threads, thread_name_prefix="verify")
        self.bulk: Executor | None = None  # None: bulk batches go to the threads
        self._pools: list[Executor] = []  # every pool started, shut down by close

    async def start_bulk(self) -> None:
        """The processes that verify large repairs; the threads do when they cannot start."""
        if self.processes <= 0:
            return
        try:
            pool = BulkVerifiers(self.processes)
        except OSError as exc:  # no /dev/shm, no processes allowed
            log.warning("bulk_verifiers_unavailable", error=repr(exc), fallback="threads")
            return
        self._pools.append(pool)
        try:
            await asyncio.to_thread(start_bulk, pool, self.processes)
        except (OSError, BrokenProcessPool) as exc:
            log.warning("bulk_verifiers_unavailable", error=repr(exc), fallback="threads")
            return
        self.bulk = pool

    def bulk_broken(self) -> None:
        """A bulk worker died (killed, out of memory): the threads verify from now on."""
        self.bulk = None

    async def close(self) -> None:
        """Waits for the verifications under way, in a thread so the loop keeps running."""
        await asyncio.to_thread(self.thread_pool.shutdown, True)
        for pool in self._pools:
            await asyncio.to_thread(pool.shutdown, True)

    def force_close(self) -> None:
        """Drops the verifications queued."""
        self.thread_pool.shutdown(wait=False, cancel_futures=True)
        for pool in self._pools:
            pool.shutdown(wait=False, cancel_futures=True)
