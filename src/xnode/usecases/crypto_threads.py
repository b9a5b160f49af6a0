"""The threads that recover and sign publishes' signatures off the event loop.

libsecp256k1 releases the GIL, so a batch's recoveries and signatures run beside the event
loop. But every recovery returns to Python and must win the GIL back from the loop: with
asyncio's default executor (cores + 4 threads) those threads mostly wait for the GIL, and the
waiting itself cost ~25 us of CPU per batched envelope (docs/benchmarks.md, issue 14: 116-120
us per envelope with one thread against 147 us with six, at the same throughput). So each
serving process gets a few threads of its own: the cores it may use, shared by the workers.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

_pool: ThreadPoolExecutor | None = None


def share(cores: int, workers: int) -> int:
    """Threads per worker when `workers` processes share `cores`: at least one."""
    return max(1, cores // max(workers, 1))


def configure(threads: int) -> None:
    """This process's crypto threads (the composition root calls this once, at start)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False)
    _pool = ThreadPoolExecutor(threads, thread_name_prefix="crypto")


async def in_crypto_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args)` in one of the crypto threads (the loop's default executor until
    `configure` ran: tests and tools that build the use cases directly)."""
    call = functools.partial(fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
