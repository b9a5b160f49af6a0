"""Keccak-256 on PyPI: what every signature digest and leaf hash of the node
costs with each implementation that installs here, on the sizes the node hashes.

    .venv/bin/python bench/bench_keccak.py [--seconds 1.0]

Candidates: safe-pysha3 (the node's, a C extension: `sha3.keccak_256`), pycryptodome
(`Crypto.Hash.keccak`, the node's before), and eth-hash's backends when installed. Each is
checked against the others on every size before it is timed. hashlib's sha3_256 is not a
candidate: it is FIPS-202 SHA3, whose padding differs from Keccak's."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from Crypto.Hash import keccak as cryptodome_keccak
from sha3 import keccak_256

SIZES = {"payer digest (~300 B)": 300, "leaf of a 1 KiB envelope": 1024, "64 B (a node pair)": 64}


def candidates() -> dict[str, Callable[[bytes], bytes]]:
    found: dict[str, Callable[[bytes], bytes]] = {
        "safe-pysha3 (node)": lambda data: keccak_256(data).digest(),
        "pycryptodome": lambda data: cryptodome_keccak.new(digest_bits=256, data=data).digest(),
    }
    try:
        from eth_hash.auto import keccak as eth_keccak  # web3's, backend chosen at import

        found["eth-hash (auto backend)"] = eth_keccak
    except ImportError:
        pass
    return found


def per_call_us(fn: Callable[[bytes], bytes], data: bytes, seconds: float) -> float:
    calls, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(1000):
            fn(data)
        calls += 1000
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    impls = candidates()
    print(f"python {sys.version.split()[0]}; load {os.getloadavg()[0]:.2f} (1 min)")
    print("| input | " + " | ".join(impls) + " | node vs pycryptodome |")
    print("|---|" + "---|" * (len(impls) + 1))
    for name, size in SIZES.items():
        data = os.urandom(size)
        digests = {fn(data) for fn in impls.values()}
        assert len(digests) == 1, f"implementations disagree on {name}"
        us = {impl: per_call_us(fn, data, args.seconds) for impl, fn in impls.items()}
        cells = " | ".join(f"{v:.2f} us" for v in us.values())
        ratio = us["pycryptodome"] / us["safe-pysha3 (node)"]
        print(f"| {name} | {cells} | {ratio:.1f}x faster |")
    print(f"load {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    main()
