"""spark_jobs.retention_expiry: the plan names exactly the present, expired envelopes."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs import gen_data as g
from tests.spark.jvm import run_job_cli

AS_OF = 1_000_000_000
DAY = 86_400
OLD_NS = (AS_OF - 200 * DAY) * 1_000_000_000  # well inside the day partitions, any row
DEFAULT_EDGE_S = AS_OF - 183 * DAY  # expiry 0 originated here: once the 183-day default


def env(originator: int, seq: int, expiry: int, kind: int = 0, ns: int | None = None) -> g.Envelope:
    return g.Envelope(originator, seq, OLD_NS + seq if ns is None else ns, kind, expiry)


EXPIRED, LATER = AS_OF - 100, AS_OF + 1

# Originator 100, as node 100 exported it. 4 is missing, 7 unexpired, 9 an identity update,
# 11/12 have expiry 0 (never: their leaves commit to it) on both sides of the edge the old
# 183-day default would have drawn; 13's copies disagree (see NODE_200).
NODE_100 = [
    env(100, 1, EXPIRED),
    env(100, 2, AS_OF),  # expiry == as_of counts as expired
    env(100, 3, EXPIRED),
    env(100, 5, EXPIRED),
    env(100, 7, LATER),
    env(100, 8, EXPIRED),
    env(100, 9, 0, kind=2),
    env(100, 10, EXPIRED, kind=1),
    env(100, 11, 0, ns=DEFAULT_EDGE_S * 1_000_000_000),
    env(100, 12, 0, ns=(DEFAULT_EDGE_S + 1) * 1_000_000_000),
    env(100, 13, EXPIRED),
    env(100, 14, EXPIRED, kind=3),
    # Originator 200: welcomes, key packages and the default rule, all expired.
    env(200, 1, EXPIRED),
    env(200, 2, EXPIRED),
    env(200, 3, EXPIRED, kind=1),
    env(200, 4, EXPIRED, kind=3),
    env(200, 5, 0, kind=3),
    # Chain payloads and identity updates: never, whatever their expiry says.
    env(0, 1, 0),
    env(0, 2, EXPIRED),
    env(1, 1, 0, kind=2),
    env(1, 2, EXPIRED, kind=2),
    env(300, 1, EXPIRED, kind=2),
    env(300, 2, 0, kind=2),
]
# Node 200's export overlaps node 100's (duplicates), holds 6 that node 100 lacks, and a copy
# of 13 that is not expired: ids whose copies disagree are kept.
NODE_200 = [
    env(100, 1, EXPIRED),
    env(100, 2, AS_OF),
    env(100, 3, EXPIRED),
    env(100, 5, EXPIRED),
    env(100, 6, EXPIRED),
    env(100, 13, LATER),
    env(200, 5, 0, kind=3),
    env(0, 2, EXPIRED),
]
EXPECTED_RANGES = [(100, 1, 3), (100, 5, 6), (100, 8, 8), (100, 10, 10), (100, 14, 14), (200, 1, 4)]


def write_fixture(root: Path) -> Path:
    g.write_envelopes(g.node_dir(root, 100), g.envelope_table(NODE_100))
    g.write_envelopes(g.node_dir(root, 200), g.envelope_table(NODE_200))
    return root


def ranges_of(plan: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [
        (r["originator_node_id"], r["first_sequence_id"], r["last_sequence_id"])
        for r in plan["ranges"]
    ]


def test_plan_covers_exactly_the_expired_envelopes(
    spark: Any, retention: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "plan.json"
    plan = retention.run(spark, [write_fixture(tmp_path / "export")], out, as_of=AS_OF)

    assert json.loads(out.read_text()) == plan
    assert plan["version"] == 1
    assert plan["as_of_unixtime"] == AS_OF
    assert ranges_of(plan) == EXPECTED_RANGES
    assert plan["envelope_count"] == 12
    stats = {s["originator_node_id"]: s for s in plan["originators"]}
    assert stats[100]["present"] == 13 and stats[100]["conflicting_copies"] == 1
    assert stats[100]["identity_updates"] == 1
    assert set(stats) == {100, 200, 300}  # chain originators never even enter the plan


def test_plan_never_names_chain_payloads_or_identity_updates(
    spark: Any, retention: ModuleType, tmp_path: Path
) -> None:
    root = write_fixture(tmp_path / "export")
    plan = retention.compute_plan(spark, [root / "node-100", root / "node-200"], AS_OF + 10**9)
    never = {(e.originator, e.sequence_id) for e in NODE_100 + NODE_200 if e.kind == 2}
    for r in plan["ranges"]:
        assert r["originator_node_id"] not in (0, 1)
        ids = range(r["first_sequence_id"], r["last_sequence_id"] + 1)
        assert not never & {(r["originator_node_id"], s) for s in ids}


def reference_ranges(table: pa.Table, as_of: int) -> list[tuple[int, int, int]]:
    """The rule, written plainly in Python, over every exported copy."""
    status: dict[tuple[int, int], bool] = {}
    for row in table.to_pylist():
        o, seq, kind, expiry = (
            row["originator_node_id"],
            row["originator_sequence_id"],
            row["topic_kind"],
            row["expiry_unixtime"],
        )
        ok = o not in (0, 1) and kind != 2 and 0 < expiry <= as_of
        status[(o, seq)] = status.get((o, seq), True) and ok
    ranges: list[tuple[int, int, int]] = []
    for o, seq in sorted(k for k, ok in status.items() if ok):
        if ranges and ranges[-1][0] == o and ranges[-1][2] == seq - 1:
            ranges[-1] = (o, ranges[-1][1], seq)
        else:
            ranges.append((o, seq, seq))
    return ranges


def test_plan_matches_a_plain_python_reference(
    spark: Any, retention: ModuleType, tmp_path: Path
) -> None:
    # 3 days either side of the default-retention edge: few day partitions (each one a file
    # per originator and node), every rule hit.
    start = (AS_OF - 186 * DAY) * 10**9
    step = 6 * DAY * 10**9 // 3000
    parts = []
    for i, originator in enumerate((0, 1, 100, 200)):
        full = g.synthetic_envelopes(originator, 1, 3000, start, step, seed=10 * i)
        parts.append((g.drop_fraction(full, 0.05, seed=i), g.drop_fraction(full, 0.5, seed=50 + i)))
    node_a = pa.concat_tables([a for a, _ in parts])
    node_b = pa.concat_tables([b for _, b in parts])
    g.write_envelopes(g.node_dir(tmp_path, 100), node_a)
    g.write_envelopes(g.node_dir(tmp_path, 200), node_b)

    plan = retention.compute_plan(spark, [tmp_path], AS_OF)

    expected = reference_ranges(pa.concat_tables([node_a, node_b]), AS_OF)
    assert len(expected) > 50  # gaps, identity updates and unexpired ids break it up
    assert ranges_of(plan) == expected
    assert plan["envelope_count"] == sum(last - first + 1 for _, first, last in expected)


def corrupt(root: Path) -> None:
    victim = next((root / "node-100" / "envelopes").rglob("*.parquet"))
    victim.write_bytes(b"PAR1 this is not a parquet file")


def wrong_schema(root: Path) -> None:
    victim = next((root / "node-100" / "envelopes").rglob("*.parquet"))
    table = pq.read_table(victim)
    kinds = table.column("topic_kind").cast(pa.int32())
    pq.write_table(table.set_column(3, "topic_kind", kinds), victim)


def missing_column(root: Path) -> None:
    victim = next((root / "node-200" / "envelopes").rglob("*.parquet"))
    pq.write_table(pq.read_table(victim).drop_columns(["expiry_unixtime"]), victim)


def emptied(root: Path) -> None:
    for node in (100, 200):
        for f in (root / f"node-{node}" / "envelopes").rglob("*.parquet"):
            f.unlink()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (corrupt, "not a readable Parquet file"),
        (wrong_schema, "column 'topic_kind' is int32, expected int8"),
        (missing_column, "missing column 'expiry_unixtime'"),
        (emptied, "no envelope Parquet files"),
    ],
)
def test_bad_input_raises_and_writes_no_plan(
    spark: Any, retention: ModuleType, inputs: ModuleType, tmp_path: Path, damage: Any, message: str
) -> None:
    root = write_fixture(tmp_path / "export")
    damage(root)
    out = tmp_path / "plan.json"
    with pytest.raises(inputs.InputError, match=message) as raised:
        retention.run(spark, [root], out, as_of=AS_OF)
    assert str(root) in str(raised.value)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [root]  # no temporary file left either


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_cli_bad_input_is_one_line_and_nonzero(
    retention: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str
) -> None:
    target = tmp_path / "input"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("x")
    out = tmp_path / "plan.json"
    out.write_text('{"previous": true}')

    assert retention.main(["--input", str(target), "--out", str(out)]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(target) in err and err.startswith("retention_expiry:")
    assert out.read_text() == '{"previous": true}'  # an old plan is left alone


def test_cli_end_to_end(tmp_path: Path) -> None:
    """`python -m spark_jobs.retention_expiry` in its own JVM, as an operator runs it."""
    root = write_fixture(tmp_path / "export")
    out = tmp_path / "plans" / "plan.json"
    args = ["--input", str(root), "--out", str(out), "--as-of", str(AS_OF), "--master", "local[1]"]
    done = run_job_cli("retention_expiry", *args, timeout_s=120)
    assert done.returncode == 0, done.stderr
    assert ranges_of(json.loads(out.read_text())) == EXPECTED_RANGES
    assert "12 expired envelopes in 6 ranges" in done.stdout


def test_file_vanishing_after_validation_is_an_input_error(
    spark: Any, retention: ModuleType, inputs: ModuleType, tmp_path: Path
) -> None:
    files = inputs.find_envelope_files([write_fixture(tmp_path / "export")])
    victim = next(iter(files.values()))[0]
    victim.unlink()
    with pytest.raises(inputs.InputError, match="cannot read input") as raised:
        retention.plan_from_files(spark, files, AS_OF)
    assert victim.name in str(raised.value)
