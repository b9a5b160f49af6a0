"""Where a batched envelope's CPU goes, stage by stage: each stage of publishing a
batch of 100, timed alone in one process (best of 5 rounds), in microseconds per envelope,
beside the budget that 15,000 envelopes/s on 2 cores leaves for all of them.

    .venv/bin/python bench/bench_publish_stages.py [--rounds 200]

No node, no database: the same calls the node makes, without its event loop, hops or I/O
(bench_cores measures those in place). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).parent))

from bench_cores import NODE, publish_request

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import envelopes, sequencer_wire, wire
from xnode.core.crypto import (
    SigningKey,
    address_of,
    originator_digest,
    payer_digest,
    recover_public_key,
    sign_digests,
)
from xnode.core.fees import FeeSchedule, Pricing
from xnode.core.merkle import Frontier
from xnode.store.logs import STORED_MIN_LEVEL

T = TypeVar("T")
BATCH = 100
BUDGET_US = 2 / 15_000 * 1e6  # 15,000 envelopes/s on 2 cores, every process included


def timed(name: str, fn: Callable[[], T], rounds: int, total: list[float]) -> T:
    result = fn()
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            result = fn()
        best = min(best, (time.perf_counter() - started) / rounds / BATCH * 1e6)
    total.append(best)
    print(f"  {name:44s} {best:7.2f} us")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200, help="batches per timing")
    rounds = parser.parse_args().rounds
    crypto_rounds = max(1, rounds // 10)
    body = publish_request(BATCH, os.urandom(16))[5:]
    key, pricing = SigningKey.generate(), Pricing(FeeSchedule())
    now = time.time_ns()
    cpu: list[float] = []
    python: list[float] = []
    print(f"per envelope, batches of {BATCH}:")
    request = timed(
        "request parsed", lambda: api.PublishPayerEnvelopesRequest.FromString(body), rounds, python
    )
    payers = list(request.payer_envelopes)
    timed(
        "payer recovery (libsecp256k1, Keccak)",
        lambda: [
            address_of(
                recover_public_key(
                    p.payer_signature.bytes,
                    payer_digest(p.target_originator, p.unsigned_client_envelope),
                )
            )
            for p in payers
        ],
        crypto_rounds,
        cpu,
    )
    valid = [envelopes.validate_payer_envelope(p, NODE) for p in payers]
    whole: list[float] = []
    timed(
        "validation, recovery included",
        lambda: [envelopes.validate_payer_envelope(p, NODE) for p in payers],
        crypto_rounds,
        whole,
    )
    python.append(whole[0] - cpu[0])
    print(f"  {'  of which rules and the valid envelope':44s} {python[-1]:7.2f} us")
    handed = timed(
        "hand-off encoded", lambda: sequencer_wire.encode_batch(1, valid), rounds, python
    )
    _, batch = timed(
        "hand-off decoded", lambda: sequencer_wire.decode_batch(handed[4:]), rounds, python
    )
    stamps = [now + i for i in range(BATCH)]
    fees = timed(
        "fees",
        lambda: pricing.batch([(len(p.raw), p.retention_days) for p in batch], now),
        rounds,
        python,
    )
    unsigned = timed(
        "unsigned originator envelope",
        lambda: [
            envelopes.unsigned_originator(p, NODE, 1 + i, stamps[i], fees[i])
            for i, p in enumerate(batch)
        ],
        rounds,
        python,
    )
    digests = timed(
        "its digest (Keccak)",
        lambda: b"".join(originator_digest(u) for u, _ in unsigned),
        rounds,
        python,
    )
    joined = timed(
        "signature (libsecp256k1)", lambda: sign_digests(key.secret, digests), crypto_rounds, cpu
    )
    signatures = [joined[i : i + 65] for i in range(0, len(joined), 65)]
    signed = timed(
        "signed originator envelope and its leaf",
        lambda: [
            envelopes.signed_originator(
                p, NODE, 1 + i, stamps[i], *unsigned[i], signatures[i], fees[i], True
            )
            for i, p in enumerate(batch)
        ],
        rounds,
        python,
    )
    timed(
        "log frontier grown",
        lambda: Frontier().extend([e.leaf for e in signed], STORED_MIN_LEVEL),
        rounds,
        python,
    )
    answer = timed(
        "answer encoded", lambda: sequencer_wire.encode_answer(1, signed), rounds, python
    )
    timed(
        "answer decoded",
        lambda: sequencer_wire.decode_answer(answer[4:], NODE, {1: valid}),
        rounds,
        python,
    )
    timed("response framed", lambda: wire.repeated(1, [e.raw for e in signed]), rounds, python)
    print(
        f"cryptography {sum(cpu):.1f} us + the stages' Python {sum(python):.1f} us = "
        f"{sum(cpu) + sum(python):.1f} us per envelope; budget for 15,000/s on 2 cores, "
        f"every process (node, Postgres, load generator) included: {BUDGET_US:.0f} us"
    )


if __name__ == "__main__":
    main()
