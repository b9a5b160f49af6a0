"""`xnode prune --plan`: deletes exactly what the plan names (and what is expired there),
idempotently, in batches; refuses bad plans before deleting anything."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import (
    DAY_S,
    NS_PER_S,
    Item,
    group,
    received_row,
    run_cli_async,
    store_received,
    table_rows,
    write_plan,
)
from xnode.commands.prune import PruneError, apply_plan
from xnode.config import Settings
from xnode.core.prune_plan import PlanRange, batch_count, batches
from xnode.core.topics import TopicKind
from xnode.devtools.postgres import free_port

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))
IDENTITY = Item(TopicKind.IDENTITY_UPDATES, group(4), b"sig")
OLD_NS = (int(time.time()) - 400 * DAY_S) * NS_PER_S  # past every retention by now


def now() -> int:
    return int(time.time())


async def prune(dsn: str, plan: Path, **kwargs: Any) -> dict[int, Any]:
    _, result = await apply_plan(Settings(database_dsn=dsn), plan, show_progress=False, **kwargs)
    return result


async def vector_clock(dsn: str) -> dict[int, int]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT originator_node_id, sequence_id FROM vector_clock")
    finally:
        await conn.close()
    return {r[0]: r[1] for r in rows}


@pytest.fixture
async def node_with_20(start_node: Any, database: str, node_spec: NodeSpec) -> str:
    """Node 100 holding originator 200's sequence ids 1-20, originated 400 days ago (long
    expired by the 183-day default); 5 and 12 are identity updates. And 21, as old, whose
    expiry is 0: its leaf commits to "never"."""
    await start_node(**node_settings(database, node_spec))
    key = node_spec.keys[200]
    rows = [
        received_row(200, key, seq, OLD_NS + seq, IDENTITY if seq in (5, 12) else GROUP)
        for seq in range(1, 21)
    ]
    never = received_row(200, key, 21, OLD_NS + 21, GROUP)
    await store_received(database, [*rows, dataclasses.replace(never, expiry=0)])
    return database


async def test_deletes_exactly_the_named_ranges_twice_is_a_no_op(
    node_with_20: str, tmp_path: Path
) -> None:
    dsn = node_with_20
    plan = write_plan(tmp_path / "plan.json", [(200, 2, 8), (200, 11, 11), (200, 15, 19)], now())
    clock = await vector_clock(dsn)

    first = await prune(dsn, plan, batch_size=3)

    left = sorted(seq for _, seq in await table_rows(dsn))
    assert left == [1, 5, 9, 10, 12, 13, 14, 20, 21]  # 5 is named but an identity update
    assert first[200].deleted == 12 and first[200].kept_identity_updates == 1
    assert await vector_clock(dsn) == clock  # pruned ids stay "seen"

    second = await prune(dsn, plan, batch_size=3)
    assert second[200].deleted == 0
    assert sorted(seq for _, seq in await table_rows(dsn)) == left


async def test_never_deletes_identity_updates_or_unexpired_rows(
    node_with_20: str, tmp_path: Path
) -> None:
    dsn = node_with_20
    # As of 300 days ago nothing was expired yet (default retention, 183 days).
    then_plan = write_plan(tmp_path / "then.json", [(200, 1, 21)], now() - 300 * DAY_S)
    result = await prune(dsn, then_plan)
    assert (result[200].deleted, result[200].kept_unexpired) == (0, 19)

    plan = write_plan(tmp_path / "all.json", [(200, 1, 21)], now())
    dry = await prune(dsn, plan, dry_run=True)
    assert (dry[200].deleted, dry[200].kept_identity_updates) == (18, 2)
    assert dry[200].kept_unexpired == 1  # 21: expiry 0 is never, not the 183-day default
    assert len(await table_rows(dsn)) == 21  # a dry run deletes nothing

    await prune(dsn, plan, batch_size=7)
    assert sorted(seq for _, seq in await table_rows(dsn)) == [5, 12, 21]


async def test_refuses_a_plan_ahead_of_the_node_s_clock(node_with_20: str, tmp_path: Path) -> None:
    """A plan judged at a time still to come would delete what has not expired yet."""
    ahead = now() + 3600
    plan = write_plan(tmp_path / "ahead.json", [(200, 1, 21)], ahead)
    with pytest.raises(PruneError, match="refusing the plan, nothing deleted") as refused:
        await prune(node_with_20, plan)
    assert f"as_of_unixtime {ahead} is ahead of this node's clock" in str(refused.value)
    assert len(await table_rows(node_with_20)) == 21


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"version": 2}, "plan version is 2"),
        ({"version": "1"}, 'plan version is "1"'),
        ({"version": True}, "plan version is true"),
        ({"ranges": [[100, 1, 5]]}, "ranges[1] must be an object"),
        (
            {"ranges": [{"originator_node_id": 0, "first_sequence_id": 1, "last_sequence_id": 5}]},
            "originator 0 (group-message commits",
        ),
        (
            {"ranges": [{"originator_node_id": 1, "first_sequence_id": 1, "last_sequence_id": 5}]},
            "originator 1 (identity updates",
        ),
        (
            {
                "ranges": [
                    {"originator_node_id": 100, "first_sequence_id": 5, "last_sequence_id": 4}
                ]
            },
            "last_sequence_id is 4, outside 5..",
        ),
        (
            {"ranges": [{"originator_node_id": 100, "first_sequence_id": 1}]},
            "lacks 'last_sequence_id'",
        ),
        ({"as_of_unixtime": None}, "as_of_unixtime must be an integer"),
    ],
)
async def test_refuses_bad_plans_and_deletes_nothing(
    node_with_20: str, tmp_path: Path, document: dict[str, Any], message: str
) -> None:
    good = {"originator_node_id": 200, "first_sequence_id": 1, "last_sequence_id": 20}
    # A valid range first: a refusal must come before any batch is applied.
    base = {"version": 1, "as_of_unixtime": now(), "envelope_count": 20, "ranges": [good]}
    if "ranges" in document:
        document = {**document, "ranges": [good, *document["ranges"]]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(base | document))
    with pytest.raises(PruneError, match="refusing the plan, nothing deleted") as refused:
        await prune(node_with_20, path)
    assert message in str(refused.value)
    assert len(await table_rows(node_with_20)) == 21


async def test_cli_prints_counts_and_refuses_with_exit_2(node_with_20: str, tmp_path: Path) -> None:
    dsn = node_with_20
    plan = write_plan(tmp_path / "plan.json", [(200, 1, 10)], now())
    dry = await run_cli_async("prune", "--plan", str(plan), "--database-dsn", dsn, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "originator 200: would delete 9, kept 1 identity updates" in dry.stdout
    done = await run_cli_async("prune", "--plan", str(plan), "--database-dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert "originator 200: deleted 9, kept 1 identity updates" in done.stdout
    assert "total: deleted 9 envelopes in 1 ranges" in done.stdout

    bad = write_plan(tmp_path / "bad.json", [(1, 1, 3)], now())
    refused = await run_cli_async("prune", "--plan", str(bad), "--database-dsn", dsn)
    assert refused.returncode == 2
    assert "xnode prune: refusing the plan, nothing deleted" in refused.stderr
    missing = await run_cli_async("prune", "--plan", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


async def test_an_unreachable_database_is_a_prune_error(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.json", [(200, 1, 10)], now())
    nobody = f"postgresql://postgres@127.0.0.1:{free_port()}/xnode"  # nothing listens there
    with pytest.raises(PruneError, match=r"^cannot connect to the database: "):
        await prune(nobody, plan)


def test_batches_cut_long_ranges_and_pack_short_ones() -> None:
    ranges = [PlanRange(100, 1, 7), PlanRange(100, 10, 10), PlanRange(200, 3, 4)]
    got = [
        [(r.originator_node_id, r.first_sequence_id, r.last_sequence_id) for r in b]
        for b in batches(ranges, 3)
    ]
    assert got == [
        [(100, 1, 3)],
        [(100, 4, 6)],
        [(100, 7, 7), (100, 10, 10), (200, 3, 3)],
        [(200, 4, 4)],
    ]
    assert batch_count(ranges, 3) == len(got)
    assert all(sum(e - f + 1 for _, f, e in b) <= 3 for b in got)
