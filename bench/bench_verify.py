"""CPU per verified envelope (the repair's and the catch-up's rate): what
`core.verification.verify_envelope` costs on one core, the repair's and the catch-up's
envelope (a group message of the bench's size), and the pickling of its verdict back from a
verifier process.

    .venv/bin/python bench/bench_verify.py [--envelopes 5000] [--rounds 5]

Prints the best round (the least disturbed by other work on the machine) beside the median
and the load average: on a shared machine the best is the nearest to the code's own cost."""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import time

from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.verification import verify_batch

NODE = 100


def envelopes(n: int, key: SigningKey, payer: SigningKey) -> list[bytes]:
    valid = validate_payer_envelope(
        build_payer_envelope(group_message_envelope(bytes(16), b"m" * 200), payer, NODE), NODE
    )
    now = time.time_ns()
    return [originate(valid, NODE, s, now + s, key).raw for s in range(1, n + 1)]


def us_per_envelope(raws: list[bytes], keys: dict[int, bytes]) -> tuple[float, float]:
    """(verify, pickle + unpickle of the verdicts) in us per envelope."""
    started = time.process_time()
    verdicts = verify_batch(raws, keys, NODE)
    verified = time.process_time()
    pickle.loads(pickle.dumps(verdicts))
    done = time.process_time()
    assert all(not hasattr(v, "reason") for v in verdicts), "an envelope did not verify"
    return (verified - started) / len(raws) * 1e6, (done - verified) / len(raws) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--envelopes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    key, payer = SigningKey.generate(), SigningKey.generate()
    raws = envelopes(args.envelopes, key, payer)
    keys = {NODE: key.public_key}
    us_per_envelope(raws[:200], keys)  # warm: caches, imports
    runs = [us_per_envelope(raws, keys) for _ in range(args.rounds)]
    verify = [v for v, _ in runs]
    pickling = [p for _, p in runs]
    print(
        f"{args.envelopes} envelopes of {len(raws[0])} B, {args.rounds} rounds; "
        f"load {' / '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print("| measure (CPU per envelope, one process) | best | median | ceiling on 2 cores |")
    print("|---|---|---|---|")
    print(
        f"| verify_envelope | {min(verify):.1f} us | {statistics.median(verify):.1f} us | "
        f"{2e6 / min(verify):,.0f} env/s |"
    )
    print(
        f"| verdicts pickled + unpickled | {min(pickling):.1f} us | "
        f"{statistics.median(pickling):.1f} us | |"
    )


if __name__ == "__main__":
    main()
