"""The Parquet side of `xnode export`: layout, schemas and the watermark (docs/export-format.md).

Crash safety rests on two rules. Every file is written under a temporary name and renamed into
place, so no reader ever sees half a file. The watermark (`_export_state.json`) moves only after
a batch's files are in place, and each file's name carries the first key it holds: after an
interruption, files whose first key is past the watermark are leftovers of the unfinished batch
and are removed before the next export writes those rows again. So rows are never lost and
never exported twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from xnode.core.registry import NodeEntry
from xnode.export.ports import EnvelopeRows, ReportRows
from xnode.export.schema import (
    CHECKPOINT_SCHEMA,
    CHECKPOINTS_DIR,
    ENVELOPE_SCHEMA,
    FORK_SCHEMA,
    FORKS_DIR,
    LEAF_SCHEMA,
    LEAVES_DIR,
    LOGS_DIR,
    NODES_SCHEMA,
    PAYER_ADDRESS_LENGTH,
    PAYLOAD_FIELD,
    REPORT_SCHEMA,
)

ENVELOPES_DIR = "envelopes"
REPORTS_DIR = "misbehavior_reports"
NODES_FILE = "nodes.parquet"
STATE_FILE = "_export_state.json"
_LOCK_FILE = ".export.lock"

# `<prefix>-<first key>-<last key>.parquet`; zero-padded so a listing sorts by key.
_BATCH_NAME = re.compile(r"^(seq|id)-(\d+)-(\d+)\.parquet$")


class ExportError(RuntimeError):
    """An export that cannot proceed; the message says why and what to do."""


@dataclass
class ExportState:
    """The watermark: the last exported key per originator, and of the reports."""

    node_id: int
    envelopes: dict[int, int] = field(default_factory=dict)
    reports: int = 0
    exported_at_ns: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "node_id": self.node_id,
                "envelopes": {str(o): s for o, s in sorted(self.envelopes.items())},
                "reports": self.reports,
                "exported_at_ns": self.exported_at_ns,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> ExportState:
        data = json.loads(text)
        return cls(
            int(data["node_id"]),
            {int(o): int(s) for o, s in data["envelopes"].items()},
            int(data["reports"]),
            int(data.get("exported_at_ns", 0)),
        )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_path(path)
    try:
        pq.write_table(table, temp)
        _fsync(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_text_atomic(text: str, path: Path) -> None:
    temp = _temp_path(path)
    try:
        with temp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync(path.parent)


def _days(ns: pa.Array) -> pa.Array:
    """UTC date of each nanosecond timestamp, as the `day=` partition value."""
    return pc.strftime(pc.cast(ns, pa.timestamp("ns")), format="%Y-%m-%d")


def envelope_table(page: EnvelopeRows) -> pa.Table:
    columns: list[pa.Array] = [
        pa.array(page.sequence_ids, pa.int64()),
        pa.array(page.originator_ns, pa.int64()),
        pa.array(page.topics, pa.binary()),
        # The kind byte leads every topic (xnode.core.topics); stored topics are never empty.
        pa.array([t[0] for t in page.topics], pa.int8()),
        pa.array([e or 0 for e in page.expiry_unixtime], pa.int64()),
        _payer_column(page),
        pa.array(page.sizes, pa.int32()),
        pa.array(page.base_fees, pa.int64()),
        pa.array(page.congestion_fees, pa.int64()),
    ]
    schema = ENVELOPE_SCHEMA
    if page.envelopes is not None:
        columns.append(pa.array(page.envelopes, pa.binary()))
        schema = schema.append(PAYLOAD_FIELD)
    return pa.Table.from_arrays(columns, schema=schema)


def _payer_column(page: EnvelopeRows) -> pa.Array:
    """Fixed 20 bytes in the contract: a stored address of another length is corrupt data,
    named here rather than failing deep inside pyarrow."""
    for seq, payer in zip(page.sequence_ids, page.payer_addresses, strict=True):
        if payer is not None and len(payer) != PAYER_ADDRESS_LENGTH:
            raise ExportError(
                f"originator {page.originator_node_id} sequence id {seq}: stored payer_address "
                f"is {len(payer)} bytes, not {PAYER_ADDRESS_LENGTH}; nothing past it exported"
            )
    return pa.array(page.payer_addresses, pa.binary(PAYER_ADDRESS_LENGTH))


def report_table(page: ReportRows, host_node_id: int) -> pa.Table:
    columns = [
        pa.array(page.ids, pa.int64()),
        pa.array(page.server_time_ns, pa.int64()),
        pa.array([host_node_id] * len(page.ids), pa.int32()),
        pa.array(page.misbehaving_node_ids, pa.int32()),
        pa.array(page.types, pa.int32()),
        pa.array(page.submitted_by_node, pa.bool_()),
        pa.array(page.reports, pa.binary()),
    ]
    return pa.Table.from_arrays(columns, schema=REPORT_SCHEMA)


def nodes_table(entries: Sequence[NodeEntry]) -> pa.Table:
    ordered = sorted(entries, key=lambda n: n.node_id)
    return pa.Table.from_arrays(
        [
            pa.array([n.node_id for n in ordered], pa.int32()),
            pa.array([n.public_key for n in ordered], pa.binary()),
            pa.array([n.enabled for n in ordered], pa.bool_()),
        ],
        schema=NODES_SCHEMA,
    )


def _split_by_day(table: pa.Table, time_column: str) -> Iterator[tuple[str, pa.Table]]:
    days = _days(table.column(time_column).combine_chunks())
    for day in pc.unique(days).to_pylist():
        yield day, table.filter(pc.equal(days, day))


def _batch_name(prefix: str, keys: pa.ChunkedArray) -> str:
    bounds = pc.min_max(keys).as_py()
    return f"{prefix}-{bounds['min']:020d}-{bounds['max']:020d}.parquet"


class ExportWriter:
    """Writes one node's export under `<out>/node-<id>/`."""

    def __init__(self, out: Path, node_id: int) -> None:
        self.node_id = node_id
        self.directory = out / f"node-{node_id}"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One export per node directory at a time: two would race on the watermark."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / _LOCK_FILE).open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ExportError(f"another export is writing {self.directory}") from None
            yield

    def load_state(self) -> ExportState:
        path = self.directory / STATE_FILE
        if not path.exists():
            return ExportState(self.node_id)
        try:
            state = ExportState.from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ExportError(f"{path}: unreadable watermark ({exc}); fix or remove it") from None
        if state.node_id != self.node_id:
            raise ExportError(
                f"{path} belongs to node {state.node_id}, but this database is node {self.node_id}"
            )
        return state

    def save_state(self, state: ExportState) -> None:
        state.exported_at_ns = time.time_ns()
        write_text_atomic(state.to_json(), self.directory / STATE_FILE)

    def remove_unfinished(self, state: ExportState) -> int:
        """Deletes what an interrupted export left past the watermark; returns the count."""
        removed = 0
        for path in _files(self.directory / ENVELOPES_DIR):
            originator = _partition_value(path, "originator_node_id")
            removed += _remove_if_past(path, state.envelopes.get(originator, 0))
        for path in _files(self.directory / REPORTS_DIR):
            removed += _remove_if_past(path, state.reports)
        return removed

    def write_envelopes(self, page: EnvelopeRows) -> list[Path]:
        table = envelope_table(page)
        base = self.directory / ENVELOPES_DIR / f"originator_node_id={page.originator_node_id}"
        return self._write_days(table, base, "originator_ns", "seq", "originator_sequence_id")

    def write_reports(self, page: ReportRows) -> list[Path]:
        table = report_table(page, self.node_id)
        base = self.directory / REPORTS_DIR
        return self._write_days(table, base, "server_time_ns", "id", "report_id")

    def write_nodes(self, entries: Sequence[NodeEntry]) -> None:
        write_parquet_atomic(nodes_table(entries), self.directory / NODES_FILE)

    def _write_days(
        self, table: pa.Table, base: Path, time_column: str, prefix: str, key: str
    ) -> list[Path]:
        written = []
        for day, part in _split_by_day(table, time_column):
            path = base / f"day={day}" / _batch_name(prefix, part.column(key))
            write_parquet_atomic(part, path)
            written.append(path)
        # The renames must be durable before the watermark that counts on them.
        for directory in {p.parent for p in written}:
            _fsync(directory)
        return written


def _files(base: Path) -> list[Path]:
    return [p for p in base.rglob("*") if p.is_file()] if base.is_dir() else []


def _remove_if_past(path: Path, mark: int) -> int:
    """Removes a temporary file, or a batch file whose first key is past `mark`."""
    match = _BATCH_NAME.match(path.name)
    temporary = path.name.startswith(".") and path.name.endswith(".tmp")
    if temporary or (match is not None and int(match.group(2)) > mark):
        path.unlink()
        return 1
    return 0  # a finished batch, or not ours: left alone


def _partition_value(path: Path, name: str) -> int:
    for part in path.parts:
        if part.startswith(name + "="):
            return int(part.partition("=")[2])
    return 0


class LogSnapshotWriter:
    """`node-<id>/logs/`, written whole at each export into a temporary directory that then
    takes its place: leaves can fill in below any watermark (repair) and forks rewrite them,
    so an incremental copy would go stale. Readers see the old snapshot or the new one."""

    def __init__(self, node_directory: Path) -> None:
        self.target = node_directory / LOGS_DIR
        self.temp = node_directory / f".{LOGS_DIR}.{os.getpid()}.tmp"
        self.parts = 0

    def __enter__(self) -> LogSnapshotWriter:
        shutil.rmtree(self.temp, ignore_errors=True)
        self.temp.mkdir(parents=True)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            shutil.rmtree(self.temp, ignore_errors=True)
            return
        old = self.target.with_name(f".{LOGS_DIR}.{os.getpid()}.old")
        if self.target.exists():
            self.target.rename(old)
        self.temp.rename(self.target)
        _fsync(self.target.parent)
        shutil.rmtree(old, ignore_errors=True)

    def _part(self, table: pa.Table, directory: Path) -> None:
        self.parts += 1
        path = directory / f"part-{self.parts:08d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)

    def leaves(
        self,
        originator: int,
        sequence_ids: Sequence[int],
        leaves: Sequence[bytes],
        expiries: Sequence[int | None],
    ) -> None:
        """`expiries`: what each leaf commits to (format 2), None for a format 1 leaf."""
        table = pa.Table.from_arrays(
            [
                pa.array(sequence_ids, pa.int64()),
                pa.array(leaves, pa.binary()),
                pa.array(expiries, pa.int64()),
            ],
            schema=LEAF_SCHEMA,
        )
        self._part(table, self.temp / LEAVES_DIR / f"originator_node_id={originator}")

    def checkpoints(self, rows: Sequence[tuple[int, int, bytes, str | None]]) -> None:
        columns = list(zip(*rows, strict=True))
        table = pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, CHECKPOINT_SCHEMA, strict=True)],
            schema=CHECKPOINT_SCHEMA,
        )
        self._part(table, self.temp / CHECKPOINTS_DIR)

    def forks(self, rows: Sequence[tuple[int, int, bytes, bytes]]) -> None:
        columns = list(zip(*rows, strict=True))
        table = pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, FORK_SCHEMA, strict=True)],
            schema=FORK_SCHEMA,
        )
        self._part(table, self.temp / FORKS_DIR)
