"""The crypto threads: a process's few threads for recovery and signing."""

from __future__ import annotations

import asyncio
import threading

from xnode.core.crypto import SigningKey, keccak256, sign_digests
from xnode.replication.verifiers import BulkVerifiers, start_bulk
from xnode.runtime import crypto_threads


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


def test_signing_falls_back_to_the_threads_once_the_process_is_lost() -> None:
    key, digests = SigningKey.generate(), keccak256(b"a") + keccak256(b"b")
    expected = key.sign(digests[:32]) + key.sign(digests[32:])
    process = BulkVerifiers(1)
    try:
        start_bulk(process, 1)
        crypto_threads.configure(1, process)
        signed = crypto_threads.in_signing_process(sign_digests, key.secret, digests)
        assert asyncio.run(signed) == expected  # in the process
        process._lifeline.cut()  # it exits, as when it is killed
        for worker in list(process._processes.values()):  # before the next call, however slow
            worker.join(30)
        signed = crypto_threads.in_signing_process(sign_digests, key.secret, digests)
        assert asyncio.run(signed) == expected  # in a thread
        assert not crypto_threads.has_signing_process()
    finally:
        crypto_threads.configure(1)
        process.shutdown(wait=False, cancel_futures=True)
