"""Aggregates payer usage across node exports (XIP-49 3.3.1): per payer, originator and UTC
day, the envelopes, bytes and signed fees, each envelope counted once.

    python -m spark_jobs.payer_usage --input DIR [--input DIR ...] --out OUTDIR [--master URL]

OUTDIR (replaced atomically) holds `usage.parquet` (payer_address, originator_node_id, day,
envelopes, envelope_bytes, base_fee_picodollars, congestion_fee_picodollars), `payers.parquet`
(the same totals per payer) and `report.md` / `report.html` with a chart per payer.
Several nodes export the same envelope (replication): rows are deduplicated by
(originator_node_id, originator_sequence_id) before anything is summed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit): make `spark_jobs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_jobs.inputs import (
    ExportFiles,
    InputError,
    find_envelope_files,
    load_envelopes,
    one_line,
    spark_read_errors,
)
from spark_jobs.output import atomic_directory
from spark_jobs.session import build_session
from spark_jobs.usage_report import UsageData, render_html, render_markdown

_KEY = ["originator_node_id", "originator_sequence_id"]
_GROUP = ["payer_address", "originator_node_id", "day"]
# Sums of picodollars can pass int64 over a large export: exact decimals instead.
_MONEY = T.DecimalType(38, 0)


def paid_envelopes(envelopes: DataFrame) -> DataFrame:
    """One row per (originator, sequence id) that has a payer, with its signed fees (0 in
    exports made before fees were signed). Copies of one envelope are identical (they carry
    one originator signature), so any copy will do."""
    return (
        envelopes.where(F.col("payer_address").isNotNull())
        .select(
            *_KEY,
            "payer_address",
            "day",
            "size_bytes",
            F.coalesce("base_fee_picodollars", F.lit(0)).alias("base_fee_picodollars"),
            F.coalesce("congestion_fee_picodollars", F.lit(0)).alias("congestion_fee_picodollars"),
        )
        .dropDuplicates(_KEY)
    )


def _sums(frame: DataFrame, keys: Sequence[str]) -> DataFrame:
    return frame.groupBy(*keys).agg(
        F.sum("envelopes").cast("long").alias("envelopes"),
        F.sum("envelope_bytes").cast("long").alias("envelope_bytes"),
        F.sum("base_fee_picodollars").cast(_MONEY).alias("base_fee_picodollars"),
        F.sum("congestion_fee_picodollars").cast(_MONEY).alias("congestion_fee_picodollars"),
    )


def usage(paid: DataFrame) -> DataFrame:
    return paid.groupBy(*_GROUP).agg(
        F.count(F.lit(1)).alias("envelopes"),
        F.sum("size_bytes").cast("long").alias("envelope_bytes"),
        F.sum(F.col("base_fee_picodollars").cast(_MONEY)).alias("base_fee_picodollars"),
        F.sum(F.col("congestion_fee_picodollars").cast(_MONEY)).alias("congestion_fee_picodollars"),
    )


def aggregate(spark: SparkSession, files: ExportFiles) -> dict[str, pa.Table]:
    with spark_read_errors(f"envelopes under {', '.join(str(b) for b in files)}"):
        raw = load_envelopes(spark, files)
        per_day = usage(paid_envelopes(raw)).persist()
        try:
            payers = _sums(per_day, ["payer_address"])
            total = F.col("base_fee_picodollars") + F.col("congestion_fee_picodollars")
            return {
                "usage": per_day.orderBy(*_GROUP).toArrow(),
                "payers": payers.orderBy(total.desc(), "payer_address").toArrow(),
                "rows_read": pa.table({"rows": [raw.count()]}),
            }
        finally:
            per_day.unpersist()


def usage_data(tables: Mapping[str, pa.Table], inputs: Sequence[str | Path]) -> UsageData:
    payers = tables["payers"].to_pylist()
    return UsageData(
        inputs=[str(i) for i in inputs],
        rows_read=int(tables["rows_read"].column("rows")[0].as_py()),
        envelopes=sum(int(r["envelopes"]) for r in payers),
        usage=tables["usage"].to_pylist(),
        payers=payers,
    )


def write_outputs(out: str | Path, tables: Mapping[str, pa.Table], data: UsageData) -> None:
    """The whole OUTDIR appears at once, or not at all."""
    with atomic_directory(out) as temp:
        for name in ("usage", "payers"):
            pq.write_table(tables[name], temp / f"{name}.parquet")
        (temp / "report.html").write_text(render_html(data), encoding="utf-8")
        (temp / "report.md").write_text(render_markdown(data), encoding="utf-8")


def run(spark: SparkSession, inputs: Sequence[str | Path], out: str | Path) -> UsageData:
    """Validates inputs (InputError), aggregates, and writes OUTDIR atomically."""
    tables = aggregate(spark, find_envelope_files(inputs))
    data = usage_data(tables, inputs)
    write_outputs(out, tables, data)
    return data


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--input", action="append", required=True, help="export directory")
    parser.add_argument("--out", required=True, help="output directory (replaced atomically)")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        files = find_envelope_files(args.input)  # before the JVM starts: bad input fails fast
        spark = build_session(args.master, app_name="xnode-payer-usage")
        try:
            tables = aggregate(spark, files)
        finally:
            spark.stop()
        data = usage_data(tables, args.input)
        write_outputs(args.out, tables, data)
    except InputError as exc:
        print(f"payer_usage: error: {one_line(exc)}", file=sys.stderr)
        return 2
    print(
        f"payer_usage: {data.envelopes} paid envelopes of {len(data.payers)} payers "
        f"({data.duplicates_removed} duplicate or unpaid rows left out) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
