"""spark_jobs.audit: the audit replay over exports finds nothing in a clean export (expired
envelopes with their leaves kept, a fork) and names each fault of a tampered one."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from spark_jobs import gen_data as g
from tests.spark.jvm import run_job_cli
from xnode.core import merkle
from xnode.core.audit import FaultKind
from xnode.core.checkpoints import envelope_leaf, sign_checkpoint
from xnode.core.forks import envelope_hash, log_keeps
from xnode.core.leaves import signed_content

KEYS = {n: g.node_key(n, seed=7) for n in (100, 200)}
NS = 1_700_000_000 * 1_000_000_000
SIZES = {100: 30, 200: 12}
EXPIRED = {100: range(1, 6)}  # envelopes gone, leaves kept


def _log(originator: int, forged: dict[int, bytes] | None = None) -> list[bytes]:
    raws = [
        g.signed_envelope(originator, KEYS[originator], s, NS + s, b"m%d" % s)
        for s in range(1, SIZES[originator] + 1)
    ]
    for sequence_id, raw in (forged or {}).items():
        raws[sequence_id - 1] = raw
    return raws


def _checkpoints(
    originator: int, leaves: list[bytes], sizes: list[int]
) -> list[tuple[int, int, bytes, None]]:
    chain: list[Any] = []
    for size in sizes:
        root = merkle.root_of(leaves[:size])
        chain.append(
            sign_checkpoint(
                KEYS[originator], originator, size, root, size, chain[-1] if chain else None
            )
        )
    return [(originator, c.tree_size, c.signed, None) for c in chain]


def write_export(root: Path, tamper: bool = False, with_expiry: bool = False) -> Path:
    """`with_expiry`: leaves carry the expiry they commit to (exports from before that
    column do not)."""
    node = g.node_dir(root, 100)
    g.write_nodes(node, KEYS)
    # A fork at 200:4: the log keeps the rule's pick; 200's checkpoint was signed over the
    # other version (the originator signed both: evidence, not a fault of this node).
    honest = _log(200)
    other = next(
        raw
        for n in range(100)
        if log_keeps(honest[3], raw := g.signed_envelope(200, KEYS[200], 4, NS + 4, b"o%d" % n))
        == raw
    )
    logs = {100: _log(100), 200: _log(200, {4: other})}
    leaves = {o: [envelope_leaf(r) for r in raws] for o, raws in logs.items()}
    checkpoints = _checkpoints(100, leaves[100], [10, 20, 30])
    checkpoints += _checkpoints(200, [envelope_leaf(r) for r in honest], [12])
    envelopes = [
        g.Envelope(o, s, NS + s, payload=raw)
        for o, raws in logs.items()
        for s, raw in enumerate(raws, start=1)
        if s not in EXPIRED.get(o, ())
    ]
    leaf_rows: dict[int, list[Any]] = {o: list(enumerate(ls, start=1)) for o, ls in leaves.items()}
    if with_expiry:
        leaf_rows = {
            o: [(s, leaf, signed_content(logs[o][s - 1])[1]) for s, leaf in rows]
            for o, rows in leaf_rows.items()
        }
    if tamper:
        fifteen = envelopes[15 - 1 - 5]
        assert fifteen.payload is not None
        raw = fifteen.payload
        flipped = raw[:-10] + bytes([raw[-10] ^ 1]) + raw[-9:]
        envelopes[15 - 1 - 5] = g.Envelope(100, 15, NS + 15, payload=flipped)
        envelopes = [e for e in envelopes if (e.originator, e.sequence_id) != (100, 25)]
        leaf_rows[100] = [r for r in leaf_rows[100] if r[0] != 25]
        wrong = sign_checkpoint(KEYS[100], 100, 10, bytes(32), 10, None)
        checkpoints[0] = (100, 10, wrong.signed, None)
    g.write_envelopes(node, g.envelope_table(envelopes))
    forks = [(200, 4, envelope_hash(v), v) for v in (honest[3], other)]
    g.write_logs(node, leaf_rows, checkpoints, forks)
    return root


@pytest.fixture(scope="module")
def audit() -> ModuleType:
    from tests.spark.conftest import _job

    return _job("audit")


def _registry(root: Path, keys: dict[int, Any] = KEYS) -> Path:
    return g.write_registry(root / "registry.json", keys)


def test_a_clean_export_passes(spark: Any, audit: ModuleType, tmp_path: Path) -> None:
    verdicts = audit.audit_exports(spark, [write_export(tmp_path)], _registry(tmp_path))
    verdict = verdicts[100]
    assert verdict.clean, verdict.describe()
    assert verdict.envelopes == 30 - 5 + 12
    # An export carries no leaf's committed expiry: a leaf without its envelope is judged as
    # format 1 (nothing provable, excused as before), never as provably expired.
    assert verdict.format1_without_envelope == 5 and verdict.expired == 0
    assert verdict.checkpoints == 4 and verdict.checkpoints_over_forks == 1
    assert verdict.conflicts == 1


def test_signatures_are_checked_against_the_chain_s_keys_never_the_export_s(
    spark: Any, audit: ModuleType, tmp_path: Path
) -> None:
    """The export lists node 100's key itself; the NodeRegistry holds another: against the
    chain's registry nothing of node 100 verifies, whatever the export says; and the job
    does not run without the chain's registry."""
    root = write_export(tmp_path / "export")
    other = {100: g.node_key(100, seed=8), 200: KEYS[200]}
    assert audit.audit_exports(spark, [root], _registry(tmp_path))[100].clean
    (tmp_path / "other").mkdir()
    verdict = audit.audit_exports(spark, [root], _registry(tmp_path / "other", other))[100]
    assert not verdict.clean, verdict.describe()
    with pytest.raises(SystemExit):
        audit._parse_args(["--input", str(root)])


def test_with_the_committed_expiry_leaves_without_envelopes_are_provably_expired(
    spark: Any, audit: ModuleType, tmp_path: Path
) -> None:
    registry = _registry(tmp_path)
    verdict = audit.audit_exports(spark, [write_export(tmp_path, with_expiry=True)], registry)[100]
    assert verdict.clean, verdict.describe()
    assert verdict.expired == 5 and verdict.format1_without_envelope == 0
    # Before that expiry, the same leaves without their envelopes are a loss.
    before = audit.audit_exports(spark, [tmp_path], registry, now_unix=NS // 10**9)[100]
    assert before.faults == {FaultKind.LOST: 5}, before.describe()


def test_a_tampered_export_is_caught_and_named(
    spark: Any, audit: ModuleType, tmp_path: Path
) -> None:
    root = write_export(tmp_path / "tampered", tamper=True)
    registry = _registry(tmp_path)
    verdict = audit.audit_exports(spark, [root], registry)[100]
    assert set(verdict.faults) == {
        FaultKind.BAD_SIGNATURE,
        FaultKind.GAP,
        FaultKind.CHECKPOINT_ROOT,
        FaultKind.CHECKPOINT_CHAIN,  # checkpoint 20 follows the original one at 10
    }, verdict.describe()
    assert {f.sequence_id for f in verdict.details if f.kind is FaultKind.GAP} == {25}
    out = tmp_path / "verdict.json"
    # The CLI in its own JVM, as an operator runs it (in this process, its spark.stop() would
    # stop the session the other Spark tests share).
    flags = ("--registry", str(registry), "--master", "local[1]")
    assert _cli("--input", str(root), "--out", str(out), *flags) == 1
    assert '"clean": false' in out.read_text()
    shutil.rmtree(root / "node-100" / "logs")
    assert _cli("--input", str(root), *flags) == 2


def _cli(*args: str) -> int:
    return run_job_cli("audit", *args).returncode
