"""The threads that recover and sign publishes' signatures off the event loop.

libsecp256k1 releases the GIL, so a batch's recoveries and signatures run beside the event
loop. But every recovery returns to Python and must win the GIL back from the loop: with
asyncio's default executor (cores + 4 threads) those threads mostly wait for the GIL, and the
waiting itself costs CPU per batched envelope. So each serving process gets a few threads of
its own: the cores it may use, shared by the workers.

The worker that signs every worker's batches signs them in a process of its own: there its
signing waited for its one GIL behind the validations and the event loop, longer than the
signing itself and under the sequencer's lock, which bounds a 2-worker node's batch
throughput; in a process it runs beside them (docs/benchmarks.md, "Measurements behind
choices in the code").
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

import structlog

log = structlog.get_logger("xnode.crypto_threads")

T = TypeVar("T")
P = ParamSpec("P")

_pool: ThreadPoolExecutor | None = None
_signing_process: Executor | None = None


def share(cores: int, workers: int) -> int:
    """Threads per worker when `workers` processes share `cores`: at least one."""
    return max(1, cores // max(workers, 1))


def configure(threads: int, signing_process: Executor | None = None) -> None:
    """This process's crypto threads, and the process that signs for the sequencer if any
    (the composition root calls this once, at start, and owns the process)."""
    global _pool, _signing_process
    if _pool is not None:
        _pool.shutdown(wait=False)
    _pool = ThreadPoolExecutor(threads, thread_name_prefix="crypto")
    _signing_process = signing_process


def has_signing_process() -> bool:
    return _signing_process is not None


async def in_crypto_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args)` in one of the crypto threads (the loop's default executor until
    `configure` ran: tests and tools that build the use cases directly)."""
    call = functools.partial(fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)


class Threads:
    """The crypto threads as the use cases see them (xnode.usecases.ports.CryptoThreads)."""

    async def run(self, call: Callable[[], T]) -> T:
        return await in_crypto_thread(call)


THREADS = Threads()


async def in_signing_process(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args)` (picklable) in the signing process, or in a crypto thread if there is
    none or it died: a signature is never refused for want of the process."""
    global _signing_process
    process = _signing_process
    if process is not None:
        call = functools.partial(fn, *args, **kwargs)
        try:
            return await asyncio.get_running_loop().run_in_executor(process, call)
        except BrokenExecutor as exc:
            if _signing_process is process:
                _signing_process = None
                log.error("signing_process_lost", error=repr(exc), fallback="crypto threads")
    return await in_crypto_thread(fn, *args, **kwargs)
