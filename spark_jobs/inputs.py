"""Finds and validates `xnode export` directories (docs/export-format.md) before Spark reads them.

Every Parquet footer is checked on the driver, so a wrong schema or a corrupt file fails fast
with an `InputError` naming the file, instead of a JVM stack trace in the middle of a job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # py4j has no hints
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from xnode.core.registry_history import RegistryHistory, RegistryHistoryError
from xnode.export.manifest import ManifestError, verify_export

ENVELOPES_DIR = "envelopes"
REPORTS_DIR = "misbehavior_reports"


class InputError(Exception):
    """Input that a job cannot use; the message names the path and the problem."""


def one_line(exc: BaseException) -> str:
    """For a CLI's single error line: library messages (pyarrow's) may span several."""
    return " ".join(str(exc).split())


def _binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _binary_or_fixed(t: pa.DataType) -> bool:
    return _binary(t) or bool(pa.types.is_fixed_size_binary(t))


def _exactly(expected: pa.DataType) -> Callable[[pa.DataType], bool]:
    return lambda t: bool(t == expected)


# Column name -> (accepts the Arrow type, description for messages, required).
ColumnRule = tuple[Callable[[pa.DataType], bool], str, bool]

ENVELOPE_COLUMNS: dict[str, ColumnRule] = {
    "originator_sequence_id": (_exactly(pa.int64()), "int64", True),
    "originator_ns": (_exactly(pa.int64()), "int64", True),
    "topic": (_binary, "binary", True),
    "topic_kind": (_exactly(pa.int8()), "int8", True),
    "expiry_unixtime": (_exactly(pa.int64()), "int64", True),
    "payer_address": (_binary_or_fixed, "binary", True),
    "size_bytes": (_exactly(pa.int32()), "int32", True),
    # Absent from exports made before fees were signed (they were 0); Spark reads null.
    "base_fee_picodollars": (_exactly(pa.int64()), "int64", False),
    "congestion_fee_picodollars": (_exactly(pa.int64()), "int64", False),
    # Present only in `--with-payloads` exports; Spark reads null where it is absent.
    "originator_envelope": (_binary, "binary", False),
}
REPORT_COLUMNS: dict[str, ColumnRule] = {
    "report_id": (_exactly(pa.int64()), "int64", True),
    "server_time_ns": (_exactly(pa.int64()), "int64", True),
    "host_node_id": (_exactly(pa.int32()), "int32", True),
    "misbehaving_node_id": (_exactly(pa.int32()), "int32", True),
    "type": (_exactly(pa.int32()), "int32", True),
    "submitted_by_node": (_exactly(pa.bool_()), "bool", True),
    "report": (_binary, "binary", True),
}

ENVELOPE_SCHEMA = T.StructType(
    [
        T.StructField("originator_sequence_id", T.LongType()),
        T.StructField("originator_ns", T.LongType()),
        T.StructField("topic", T.BinaryType()),
        T.StructField("topic_kind", T.ByteType()),
        T.StructField("expiry_unixtime", T.LongType()),
        T.StructField("payer_address", T.BinaryType()),
        T.StructField("size_bytes", T.IntegerType()),
        T.StructField("base_fee_picodollars", T.LongType()),
        T.StructField("congestion_fee_picodollars", T.LongType()),
        T.StructField("originator_envelope", T.BinaryType()),
        # Hive partition columns, typed here so Spark does not infer `day` as a date.
        T.StructField("originator_node_id", T.IntegerType()),
        T.StructField("day", T.StringType()),
    ]
)
REPORT_SCHEMA = T.StructType(
    [
        T.StructField("report_id", T.LongType()),
        T.StructField("server_time_ns", T.LongType()),
        T.StructField("host_node_id", T.IntegerType()),
        T.StructField("misbehaving_node_id", T.IntegerType()),
        T.StructField("type", T.IntegerType()),
        T.StructField("submitted_by_node", T.BooleanType()),
        T.StructField("report", T.BinaryType()),
        T.StructField("day", T.StringType()),
    ]
)

_ENVELOPE_PARTITION = re.compile(r"^originator_node_id=-?\d+/day=\d{4}-\d{2}-\d{2}$")
_REPORT_PARTITION = re.compile(r"^day=\d{4}-\d{2}-\d{2}$")


# Export base directory (`node-<id>/envelopes`) -> its validated Parquet files.
ExportFiles = dict[Path, list[Path]]


def find_node_dirs(inputs: Sequence[str | Path]) -> list[Path]:
    """Each input is an export root holding `node-<id>/` directories, or one such directory."""
    if not inputs:
        raise InputError("no --input directory given")
    found: list[Path] = []
    for raw in inputs:
        root = Path(raw)
        if not root.exists():
            raise InputError(f"{root}: input directory does not exist")
        if not root.is_dir():
            raise InputError(f"{root}: input is not a directory")
        nodes = [root] if root.name.startswith("node-") else sorted(root.glob("node-*"))
        nodes = [n for n in nodes if n.is_dir()]
        if not nodes:
            raise InputError(f"{root}: no node-<id> export directories (empty export?)")
        found.extend(nodes)
    return found


def _check_schema(path: Path, columns: dict[str, ColumnRule]) -> None:
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    for name, (accepts, expected, required) in columns.items():
        index = schema.get_field_index(name)
        if index < 0:
            if required:
                raise InputError(f"{path}: schema mismatch, missing column {name!r}")
            continue
        actual = schema.field(index).type
        if not accepts(actual):
            raise InputError(
                f"{path}: schema mismatch, column {name!r} is {actual}, expected {expected}"
            )


def validate_files(files: Sequence[Path], columns: dict[str, ColumnRule]) -> None:
    """Reads every footer (threads: it is I/O) and raises on the first bad file."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(lambda f: _check_schema(f, columns), files):
            pass


def _partition_files(base: Path, pattern: re.Pattern[str]) -> list[Path]:
    files = sorted(p for p in base.rglob("*.parquet") if not p.name.startswith((".", "_")))
    for file in files:
        partition = file.parent.relative_to(base).as_posix()
        if not pattern.match(partition):
            raise InputError(
                f"{file}: not in the export's partition layout (found {partition!r} under {base})"
            )
    return files


def _dataset_files(
    node_dirs: Sequence[Path],
    subdir: str,
    pattern: re.Pattern[str],
    what: str,
    may_be_empty: bool = False,
) -> ExportFiles:
    by_base: ExportFiles = {}
    for node in node_dirs:
        base = node / subdir
        if base.is_dir():
            files = _partition_files(base, pattern)
            if files:
                by_base[base] = files
    if not by_base and not may_be_empty:
        listed = ", ".join(str(n) for n in node_dirs)
        raise InputError(f"no {what} Parquet files under {subdir}/ of: {listed}")
    return by_base


def _read_partitioned(spark: SparkSession, by_base: ExportFiles, schema: T.StructType) -> DataFrame:
    if not by_base:
        return spark.createDataFrame([], schema)
    frames = [
        spark.read.schema(schema).option("basePath", str(base)).parquet(*(str(f) for f in files))
        for base, files in by_base.items()
    ]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def find_envelope_files(inputs: Sequence[str | Path]) -> ExportFiles:
    """Locates and validates every envelope file; needs no Spark, so it can fail fast."""
    by_base = _dataset_files(find_node_dirs(inputs), ENVELOPES_DIR, _ENVELOPE_PARTITION, "envelope")
    validate_files([f for files in by_base.values() for f in files], ENVELOPE_COLUMNS)
    return by_base


def find_report_files(
    inputs: Sequence[str | Path], node_dirs: Sequence[Path] | None = None
) -> ExportFiles:
    """Exports without a report are fine: a quiet network files none, and the council's
    answer for it is that nobody is flagged. `node_dirs`: only these exports (the signed
    ones), else every export under `inputs`."""
    dirs = find_node_dirs(inputs) if node_dirs is None else node_dirs
    by_base = _dataset_files(dirs, REPORTS_DIR, _REPORT_PARTITION, "misbehavior report", True)
    validate_files([f for files in by_base.values() for f in files], REPORT_COLUMNS)
    return by_base


def load_envelopes(spark: SparkSession, files: ExportFiles) -> DataFrame:
    """All exported envelope rows, as exported (not deduplicated)."""
    return _read_partitioned(spark, files, ENVELOPE_SCHEMA)


def load_reports(spark: SparkSession, files: ExportFiles) -> DataFrame:
    """All exported misbehavior report rows (not deduplicated)."""
    return _read_partitioned(spark, files, REPORT_SCHEMA)


def read_registry_history(path: str | Path) -> RegistryHistory:
    """The registry snapshot `xnode chain registry-snapshot` wrote from the NodeRegistry
    contract's events: keys, and enabled over time."""
    try:
        return RegistryHistory.from_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the registry snapshot ({exc})") from None
    except RegistryHistoryError as exc:
        raise InputError(f"{path}: {exc}") from None


_NODE_DIR = re.compile(r"^node-(\d+)$")


def signed_exports(
    inputs: Sequence[str | Path], history: RegistryHistory, under: Sequence[str]
) -> tuple[list[Path], dict[str, str]]:
    """The export directories whose files below `under` are as their node signed them (its
    manifest, signed by the key the registry holds for it), and every other one refused,
    by path, with the reason. A refused export is left out, not fatal: one operator's bad
    files must not stop the council judging everyone else's."""
    keys = history.keys()
    accepted: list[Path] = []
    refused: dict[str, str] = {}
    for node_dir in find_node_dirs(inputs):
        match = _NODE_DIR.match(node_dir.name)
        node_keys = keys.get(int(match.group(1))) if match else None
        if match is None or not node_keys:
            refused[str(node_dir)] = "not the export of a node in the NodeRegistry"
            continue
        try:
            verify_export(node_dir, int(match.group(1)), node_keys, under)
        except ManifestError as exc:
            refused[str(node_dir)] = str(exc)
            continue
        accepted.append(node_dir)
    return accepted, refused


# Spark's error classes and Java exceptions for unreadable input files. Deliberately narrow:
# a bug elsewhere (its message may well mention "parquet" in a plan) must not pass for bad input.
_READ_FAILURE_MARKERS = (
    "FAILED_READ_FILE",
    "PATH_NOT_FOUND",
    "CANNOT_READ_FILE_FOOTER",
    "FileNotFoundException",
    "ParquetDecodingException",
    "is not a Parquet file",
)


def _is_read_failure(exc: Exception) -> bool:
    if not isinstance(exc, PySparkException | Py4JJavaError):
        return False
    text = str(exc)
    return any(marker in text for marker in _READ_FAILURE_MARKERS)


@contextmanager
def spark_read_errors(description: str) -> Iterator[None]:
    """Turns Spark's failures to read input files (a file corrupt past its footer, or deleted
    after validation) into an InputError with one clear line."""
    try:
        yield
    except Exception as exc:
        if not _is_read_failure(exc):
            raise
        text = str(exc)
        first = next((line for line in text.splitlines() if line.strip()), text)
        raise InputError(f"{description}: cannot read input ({first.strip()[:300]})") from None
