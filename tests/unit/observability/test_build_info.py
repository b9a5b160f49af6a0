"""`xnode --version` and xnode_build_info name the package version and the commit."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from xnode.observability import build_info as build_info_module
from xnode.observability.build_info import UNKNOWN, build_info
from xnode.observability.metrics import NodeLabelled

ROOT = Path(__file__).resolve().parents[3]


def _head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_installed_script_prints_version_and_commit() -> None:
    xnode = Path(sys.executable).with_name("xnode")
    done = subprocess.run([str(xnode), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"xnode {metadata.version('xnode')} (commit {_head()})"


def test_a_baked_commit_wins_over_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    baked = tmp_path / "BUILD_COMMIT"
    monkeypatch.setattr(build_info_module, "COMMIT_FILE", baked)
    baked.write_text("0123abcd\n")
    assert build_info_module._commit() == "0123abcd"
    baked.write_text(f"{UNKNOWN}\n")  # an image built without a commit: git, if any, tells
    assert build_info_module._commit() == _head()


def test_metrics_carry_the_build_info() -> None:
    """Served as every metrics endpoint serves the process's metrics (node, gateway)."""
    info = build_info()
    served = CollectorRegistry(auto_describe=False)
    served.register(NodeLabelled(100))
    samples = [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(generate_latest(served).decode())
        for sample in family.samples
        if sample.name == "xnode_build_info"
    ]
    assert samples == [({"version": info.version, "commit": info.commit, "node": "100"}, 1.0)]
