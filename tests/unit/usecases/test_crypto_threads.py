"""The crypto threads: a process's few threads for recovery and signing."""

from __future__ import annotations

import asyncio
import threading

from xnode.usecases import crypto_threads


def test_the_share_of_the_cores_is_at_least_one_thread() -> None:
    assert crypto_threads.share(2, 1) == 2
    assert crypto_threads.share(2, 2) == 1
    assert crypto_threads.share(2, 4) == 1
    assert crypto_threads.share(16, 4) == 4


def test_calls_run_in_the_configured_threads() -> None:
    crypto_threads.configure(1)

    async def names() -> set[str]:
        calls = [
            crypto_threads.in_crypto_thread(lambda: threading.current_thread().name)
            for _ in range(8)
        ]
        return set(await asyncio.gather(*calls))

    assert asyncio.run(names()) == {"crypto_0"}
