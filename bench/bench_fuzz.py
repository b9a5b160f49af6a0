"""Fuzz of every parser of client- or peer-supplied bytes, at bench scale.

    .venv/bin/python bench/bench_fuzz.py [--total 100000]

Runs the targets of tests/unit/core/test_parser_fuzz.py (CI runs 200 inputs each) until
`--total` inputs have been tried in all, and prints each figure beside its bound: inputs tried
(at least --total) and exceptions that escaped as anything but the parser's own refusal (0).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.unit.core.test_parser_fuzz import TARGETS, Target, mutated, run


def fuzz(target: Target, examples: int) -> tuple[int, list[str]]:
    tried = 0
    escaped: list[str] = []

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(mutated(target.seeds))
    def check(data: bytes) -> None:
        nonlocal tried
        tried += 1
        try:
            run(target, data)
        except Exception as exc:  # every escape is a finding, reported below
            escaped.append(f"{target.name}: {type(exc).__name__}: {exc} on {data.hex()[:80]}")

    check()
    return tried, escaped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=100_000)
    args = parser.parse_args()
    per_target = -(-args.total // len(TARGETS))
    started = time.perf_counter()
    total, escaped = 0, []
    for target in TARGETS:
        tried, found = fuzz(target, per_target)
        total += tried
        escaped += found
        print(f"  {target.name:<24} {tried:>8,} inputs  {len(found)} escaped")
    seconds = time.perf_counter() - started
    print(f"inputs tried        {total:>10,}   floor {args.total:,}")
    print(f"escaped exceptions  {len(escaped):>10,}   ceiling 0")
    print(f"rate                {total / seconds:>10,.0f} inputs/s over {seconds:.0f} s")
    for line in escaped[:20]:
        print("  " + line)
    if total < args.total or escaped:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
