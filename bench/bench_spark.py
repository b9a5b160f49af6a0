"""Benchmark of the three Spark jobs on synthetic exports (spark_jobs/gen_data.py).

    .venv/bin/python bench/bench_spark.py [--rows 10000000] [--reports 200000] [--master local[2]]

Envelopes: 6 originators (0 and 1 are the chain), two node exports that overlap the way
replicas do (node 100 exported everything, node 200 an older two thirds), each missing 1% at
random; ~240 days of daily partitions. Reports: 10 hosts, signed for real (2% forged, 1% exported
twice, plus duplicate-sequence proofs). Signing dominates report generation, hence 200k
rather than 1M reports by default. Generation is timed apart from the jobs; the jobs share
one SparkSession whose start-up is timed on its own.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_jobs import gen_data as g
from spark_jobs import misbehavior_aggregation, payer_usage, retention_expiry
from spark_jobs.session import build_session
from xnode.core.constants import NS_PER_SECOND, SECONDS_PER_DAY

AS_OF = 1_790_000_000
ORIGINATORS = (0, 1, 100, 200, 300, 400)
HOSTS = tuple(range(100, 1100, 100))
SPAN_DAYS = 240
T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def generate_envelopes(root: Path, rows: int) -> int:
    """Node 100: every id minus 1%; node 200: the first two thirds minus 1%."""
    per_originator = round(rows / (len(ORIGINATORS) * (0.99 + 0.66)))
    span_ns = SPAN_DAYS * SECONDS_PER_DAY * NS_PER_SECOND
    start_ns = AS_OF * NS_PER_SECOND - span_ns
    step = span_ns // per_originator
    written = 0
    for i, originator in enumerate(ORIGINATORS):
        full = g.synthetic_envelopes(originator, 1, per_originator, start_ns, step, seed=i * 10)
        older = full.slice(0, per_originator * 2 // 3)
        for node, table in ((100, full), (200, older)):
            table = g.drop_fraction(table, 0.01, seed=node + i)
            g.write_envelopes(g.node_dir(root, node), table)
            written += table.num_rows
    return written


REGISTRY_FILE = "registry.json"  # beside the node-<id> exports: the NodeRegistry's history


def generate_reports(root: Path, count: int) -> int:
    keys = {h: g.node_key(h) for h in HOSTS}
    week_ns = 7 * SECONDS_PER_DAY * NS_PER_SECOND
    mix = g.ReportMix(HOSTS, count, AS_OF * NS_PER_SECOND - week_ns, week_ns)
    tables = g.synthetic_reports(mix, keys)
    for host, table in tables.items():
        g.write_reports(g.node_dir(root, host), table)
        g.write_nodes(g.node_dir(root, host), keys)
        g.sign_export(g.node_dir(root, host), host, keys[host])
    g.write_registry(root / REGISTRY_FILE, keys)
    return sum(t.num_rows for t in tables.values())


def table(rows: list[tuple[str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="exported envelope rows")
    parser.add_argument("--reports", type=int, default=200_000, help="signed report rows")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", type=Path, default=None, help="kept if given")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="xnode-bench-"))
    envelopes_dir, reports_dir, out = work / "envelopes", work / "reports", work / "out"
    for stale in (envelopes_dir, reports_dir, out):  # a reused --workdir starts clean
        shutil.rmtree(stale, ignore_errors=True)
    try:
        env_rows, env_gen = timed(lambda: generate_envelopes(envelopes_dir, args.rows))
        files = sum(1 for _ in envelopes_dir.rglob("*.parquet"))
        rep_rows, rep_gen = timed(lambda: generate_reports(reports_dir, args.reports))
        spark, start = timed(lambda: build_session(args.master, app_name="xnode-bench"))
        plan: Any
        plan, retention_s = timed(
            lambda: retention_expiry.run(spark, [envelopes_dir], out / "plan.json", AS_OF)
        )
        council, aggregation_s = timed(
            lambda: misbehavior_aggregation.run(
                spark, [reports_dir], out / "council", reports_dir / REGISTRY_FILE
            )
        )
        usage, usage_s = timed(lambda: payer_usage.run(spark, [envelopes_dir], out / "usage"))
        spark.stop()
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nmaster {args.master}; pyarrow {pa.__version__}; {files:,} envelope Parquet files")
    print(
        table(
            [
                ("step", "rows", "seconds"),
                ("generate envelopes", f"{env_rows:,}", f"{env_gen:.1f}"),
                ("generate signed reports", f"{rep_rows:,}", f"{rep_gen:.1f}"),
                ("SparkSession start", "", f"{start:.1f}"),
                ("retention_expiry", f"{env_rows:,}", f"{retention_s:.1f}"),
                ("misbehavior_aggregation", f"{rep_rows:,}", f"{aggregation_s:.1f}"),
                ("payer_usage", f"{env_rows:,}", f"{usage_s:.1f}"),
            ]
        )
    )
    print(
        f"\nplan: {plan['envelope_count']:,} expired envelopes in {len(plan['ranges']):,} ranges; "
        f"reports: {council.accepted:,} accepted, {council.rejected:,} rejected, "
        f"{council.duplicates_removed:,} duplicates, {len(council.safety)} proofs; "
        f"usage: {usage.envelopes:,} paid envelopes of {len(usage.payers)} payers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
