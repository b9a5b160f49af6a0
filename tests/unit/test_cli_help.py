"""Every command a user can type answers `--help` without a traceback.

The parser is walked, so a subcommand added later is covered without touching this file.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from xnode.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "bench").glob("bench_*.py")) + [
    path for path in sorted((ROOT / "spark_jobs").glob("*.py")) if "argparse" in path.read_text()
]


def _command_paths(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[str, ...]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _command_paths(child, (*path, name))


COMMANDS = list(_command_paths(build_parser(), ()))


def test_the_walk_finds_nested_commands() -> None:
    assert ("run",) in COMMANDS
    assert any(len(path) == 2 and path[0] == "chain" for path in COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("xnode", *p)))
def test_help_prints_usage(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: xnode" + "".join(f" {p}" for p in path))


def test_settings_help_keeps_percent_signs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "100% of" in capsys.readouterr().out


def test_installed_script_answers_help() -> None:
    xnode = Path(sys.executable).with_name("xnode")
    done = subprocess.run([str(xnode), "run", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--database-dsn" in done.stdout


@pytest.fixture(scope="module")
def script_helps() -> dict[Path, subprocess.CompletedProcess[str]]:
    """`--help` of every script, run side by side: each is mostly interpreter start-up and
    imports, so one after another they would dominate the fast suite."""

    def run(script: Path) -> subprocess.CompletedProcess[str]:
        # spark_jobs is a package its jobs import from; bench scripts run as files.
        is_job = script.parent.name == "spark_jobs"
        how = ["-m", f"spark_jobs.{script.stem}"] if is_job else [str(script)]
        return subprocess.run(
            [sys.executable, *how, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(SCRIPTS, pool.map(run, SCRIPTS), strict=True))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_help(
    script: Path, script_helps: dict[Path, subprocess.CompletedProcess[str]]
) -> None:
    done = script_helps[script]
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
