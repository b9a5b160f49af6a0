"""Plans which exported envelopes have passed retention (XIP-49 3.2.4), as compact ranges.

    python -m spark_jobs.retention_expiry --input DIR [--input DIR ...] --out PLAN.json
        [--as-of UNIX] [--master URL]

The plan (docs/export-format.md) names only sequence ids that were present in the exports and
expired at `as_of`; `xnode prune --plan` deletes them. Being wrong means deleting data, so every
doubt resolves to "keep": an id is planned only if every exported copy of it is expired.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (spark-submit): make `spark_jobs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_jobs.inputs import (
    ExportFiles,
    InputError,
    find_envelope_files,
    load_envelopes,
    one_line,
    spark_read_errors,
)
from spark_jobs.output import write_json_atomic
from spark_jobs.session import build_session
from xnode.core.constants import CHAIN_ORIGINATORS
from xnode.core.prune_plan import PLAN_VERSION
from xnode.core.retention import DEFAULT_RETENTION_DAYS
from xnode.core.topics import TopicKind

_IDENTITY_UPDATES_KIND = int(TopicKind.IDENTITY_UPDATES)
_KEY = ["originator_node_id", "originator_sequence_id"]


def expired(as_of: int) -> Column:
    """Whether one exported row is past retention at `as_of` (unix seconds). Expiry 0 is
    never, whatever the kind: the envelope's leaf commits to its own expiry, and a payload
    deleted while its leaf says "never" reads as lost, its originator as a withholder."""
    expiry = F.col("expiry_unixtime")
    never = F.col("originator_node_id").isin(*CHAIN_ORIGINATORS) | (
        F.col("topic_kind") == _IDENTITY_UPDATES_KIND
    )
    return F.coalesce(~never & (expiry > 0) & (expiry <= F.lit(as_of)), F.lit(False))


def ids_with_status(envelopes: DataFrame, as_of: int) -> DataFrame:
    """One row per (originator, sequence id) across all exports; chain originators dropped
    early (they are never planned and cannot break another originator's ranges)."""
    rows = envelopes.where(~F.col("originator_node_id").isin(*CHAIN_ORIGINATORS)).select(
        *_KEY,
        expired(as_of).alias("expired"),
        (F.col("topic_kind") == _IDENTITY_UPDATES_KIND).alias("identity_update"),
    )
    return rows.groupBy(*_KEY).agg(
        F.bool_and("expired").alias("expired"),
        # Copies that disagree (a misbehaving originator) are kept, and counted.
        (F.bool_or("expired") & ~F.bool_and("expired")).alias("conflicting"),
        F.bool_or("identity_update").alias("identity_update"),
    )


def expired_ranges(ids: DataFrame) -> DataFrame:
    """Gaps and islands: among present-and-expired ids, consecutive ids share seq - row_number.
    A missing or unexpired id is absent here, so it ends the island."""
    window = Window.partitionBy("originator_node_id").orderBy("originator_sequence_id")
    islands = ids.where("expired").withColumn(
        "island", F.col("originator_sequence_id") - F.row_number().over(window)
    )
    return islands.groupBy("originator_node_id", "island").agg(
        F.min("originator_sequence_id").alias("first_sequence_id"),
        F.max("originator_sequence_id").alias("last_sequence_id"),
        F.count("*").alias("count"),
    )


def originator_stats(ids: DataFrame) -> DataFrame:
    return ids.groupBy("originator_node_id").agg(
        F.count("*").alias("present"),
        F.sum(F.col("expired").cast("long")).alias("expired"),
        F.sum(F.col("conflicting").cast("long")).alias("conflicting"),
        F.sum(F.col("identity_update").cast("long")).alias("identity_updates"),
    )


def _ranges_json(table: pa.Table) -> list[dict[str, int]]:
    """Sorted plan ranges; Arrow, not Row objects: there can be hundreds of thousands."""
    table = table.sort_by([("originator_node_id", "ascending"), ("first_sequence_id", "ascending")])
    chain = set(table.column("originator_node_id").unique().to_pylist()) & set(CHAIN_ORIGINATORS)
    if chain:  # construction guarantees this; a plan must never break it
        raise AssertionError(f"plan would prune chain originators {sorted(chain)}")
    columns = ["originator_node_id", "first_sequence_id", "last_sequence_id"]
    ranges: list[dict[str, int]] = table.select(columns).to_pylist()
    return ranges


def _stats_json(stats: list[Any], ranges: list[dict[str, int]]) -> list[dict[str, int]]:
    range_counts: dict[int, int] = {}
    for r in ranges:
        range_counts[r["originator_node_id"]] = range_counts.get(r["originator_node_id"], 0) + 1
    return [
        {
            "originator_node_id": int(s.originator_node_id),
            "present": int(s.present),
            "expired": int(s.expired),
            "ranges": range_counts.get(int(s.originator_node_id), 0),
            "conflicting_copies": int(s.conflicting),
            "identity_updates": int(s.identity_updates),
        }
        for s in sorted(stats, key=lambda s: int(s.originator_node_id))
    ]


def plan_from_files(spark: SparkSession, files: ExportFiles, as_of: int) -> dict[str, Any]:
    """The plan document for already-validated export files."""
    with spark_read_errors(f"envelopes under {', '.join(str(b) for b in files)}"):
        ids = ids_with_status(load_envelopes(spark, files), as_of)
        ids = ids.persist(StorageLevel.MEMORY_AND_DISK)  # two actions below share one shuffle
        try:
            range_table = expired_ranges(ids).toArrow()
            stat_rows = originator_stats(ids).collect()
        finally:
            ids.unpersist()
    ranges = _ranges_json(range_table)
    return {
        "version": PLAN_VERSION,
        "as_of_unixtime": as_of,
        "envelope_count": int(pc.sum(range_table.column("count")).as_py() or 0),
        "ranges": ranges,
        # Informational; `xnode prune` reads only the keys above.
        "default_retention_days": DEFAULT_RETENTION_DAYS,
        "generated_at_unixtime": int(time.time()),
        "inputs": sorted(str(base) for base in files),
        "originators": _stats_json(stat_rows, ranges),
    }


def compute_plan(
    spark: SparkSession, inputs: Sequence[str | Path], as_of: int | None = None
) -> dict[str, Any]:
    """Validates the inputs (InputError on a problem) and returns the plan document."""
    files = find_envelope_files(inputs)
    return plan_from_files(spark, files, int(time.time()) if as_of is None else as_of)


def run(
    spark: SparkSession, inputs: Sequence[str | Path], out: str | Path, as_of: int | None = None
) -> dict[str, Any]:
    """Computes and atomically writes the plan; nothing is written if anything fails."""
    plan = compute_plan(spark, inputs, as_of)
    write_json_atomic(out, plan)
    return plan


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", action="append", required=True, help="export directory")
    parser.add_argument("--out", required=True, help="plan JSON to write")
    parser.add_argument("--as-of", type=int, default=None, help="unix seconds (default: now)")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    as_of = int(time.time()) if args.as_of is None else args.as_of
    try:
        files = find_envelope_files(args.input)  # before the JVM starts: bad input fails fast
        spark = build_session(args.master, app_name="xnode-retention-expiry")
        try:
            plan = plan_from_files(spark, files, as_of)
        finally:
            spark.stop()
        write_json_atomic(args.out, plan)
    except InputError as exc:
        print(f"retention_expiry: error: {one_line(exc)}", file=sys.stderr)
        return 2
    print(
        f"retention_expiry: {plan['envelope_count']} expired envelopes in "
        f"{len(plan['ranges'])} ranges as of {as_of} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
