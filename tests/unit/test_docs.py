"""The documentation says only what is true of the code: every shell block of the README and
docs/ parses, every command it names exists with the flags it uses, and the configuration
reference is the one `xnode settings` prints. (Blocks are run in tests/e2e/test_docs_blocks.py.)
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs_blocks import ROOT, Block, all_blocks, blocks_of, commands
from xnode.cli import build_parser
from xnode.config import settings_table
from xnode.gateway.settings import gateway_settings_table

BLOCKS = all_blocks()
PYTHONS = {"python", "python3", ".venv/bin/python", sys.executable}
README_MOST_LINES = 300
CODE = ["src/xnode", "bench", "spark_jobs", "migrations"]
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? ?#?\d+")
OUTSIDE = re.compile(r"\.\./shared|wire-facts")


def _xnode_error(argv: list[str]) -> str | None:
    """What xnode's own parser says against these arguments, or None when it takes them."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exit_:
        return None if exit_.code == 0 else stderr.getvalue().strip()
    return None


@functools.cache
def _help_of(how: tuple[str, ...]) -> str:
    done = subprocess.run(
        [sys.executable, *how, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, f"{' '.join(how)} --help: {done.stderr[-2000:]}"
    return done.stdout


def _python_error(args: list[str]) -> str | None:
    if args[:1] == ["-m"]:
        module, flags = args[1], args[2:]
        if not module.startswith(("spark_jobs.", "xnode.")):
            return None
        how: tuple[str, ...] = ("-m", module)
    else:
        script, flags = args[0], args[1:]
        if not (ROOT / script).is_file():
            return f"{script}: no such file in the repository"
        how = (script,)
    wanted = [f.split("=")[0] for f in flags if f.startswith("--")]
    # A flag its own file declares needs no interpreter started; others ask its --help.
    source = _source_of(how)
    unknown = [f for f in wanted if f'"{f}"' not in source]
    if unknown:
        usage = _help_of(how)
        unknown = [f for f in unknown if f not in usage]
    return f"{' '.join(how)}: no flag {unknown}" if unknown else None


def _source_of(how: tuple[str, ...]) -> str:
    path = ROOT / (how[1].replace(".", "/") + ".py" if how[0] == "-m" else how[0])
    return path.read_text() if path.is_file() else ""


@functools.cache
def _make_targets() -> frozenset[str]:
    makefile = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.MULTILINE))


def command_error(words: list[str]) -> str | None:
    """Why a documented command would not work as written, or None."""
    program, args = words[0], words[1:]
    if program == "xnode":
        return _xnode_error(args)
    if program in PYTHONS:
        return _python_error(args)
    if program == "make":
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        missing = sorted(set(targets) - _make_targets())
        return f"make: no target {missing}" if missing else None
    if "/" in program and not program.startswith(("/", "$")) and not (ROOT / program).exists():
        # Paths the reader makes first (dist/, exports/) are not programs; node_modules is npm's.
        return f"{program}: no such file in the repository"
    return None


def test_the_blocks_are_found() -> None:
    modes = {block.mode for block in BLOCKS}
    assert modes == {"run", "devnet", "no-run"}, modes
    assert any(block.path.name == "README.md" for block in BLOCKS)


def test_an_unknown_fence_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh maybe\nxnode run\n```\n")
    with pytest.raises(ValueError, match=r"page\.md:1"):
        blocks_of(page)


def test_commands_are_split_as_the_shell_splits_them() -> None:
    text = (
        "A=1 xnode query --limit 2 2>/dev/null && make lint > o  # why\n"
        "x \\\n  --y a.tar.gz#env ...\n"
    )
    assert commands(text) == [
        ["xnode", "query", "--limit", "2"],
        ["make", "lint"],
        ["x", "--y", "a.tar.gz#env"],
    ]


def test_a_wrong_flag_is_caught() -> None:
    assert command_error(["xnode", "query", "--no-such-flag"]) is not None
    assert command_error(["make", "no-such-target"]) is not None
    assert command_error(["python", "-m", "spark_jobs.payer_usage", "--nope"]) is not None
    assert command_error(["xnode", "query", "--limit", "2"]) is None


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_parses_as_shell(block: Block) -> None:
    done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    assert done.returncode == 0, f"{block.name}: {done.stderr}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_commands_exist_with_their_flags(block: Block) -> None:
    errors = [f"{' '.join(w)}\n  {e}" for w in commands(block.text) if (e := command_error(w))]
    assert not errors, f"{block.name}:\n" + "\n".join(errors)


def test_configuration_reference_is_generated_from_settings() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert settings_table() in page, "docs/configuration.md: paste the output of `xnode settings`"


def test_gateway_settings_reference_is_generated_from_settings() -> None:
    page = (ROOT / "docs" / "gateway-reference.md").read_text()
    assert gateway_settings_table() in page, "gateway-reference.md: paste gateway_settings_table()"


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines"
    links = re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines))
    missing = [link for link in links if not (ROOT / link).exists()]
    assert links and not missing, missing


def test_docs_point_at_nothing_outside_the_repository() -> None:
    outside = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "../shared" in line or "wire-facts" in line
    ]
    assert not outside, outside


def _comment_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a Python file's comments and docstrings, numbered."""
    text = path.read_text()
    lines = text.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                for n in range(first.lineno, (first.end_lineno or first.lineno) + 1):
                    yield n, lines[n - 1]


def _code_comments() -> Iterator[tuple[str, str]]:
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in _comment_lines(path):
                yield f"{path.relative_to(ROOT)}:{n}", line
    for path in sorted((ROOT / "proto").rglob("*.proto")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("//"):
                yield f"{path.relative_to(ROOT)}:{n}", line


def test_code_comments_cite_no_issue_numbers_and_nothing_outside_the_repository() -> None:
    # Issue numbers mean nothing to a reader of the code; measurements belong in
    # docs/benchmarks.md, where they are dated.
    found = [
        f"{where}: {line.strip()}"
        for where, line in _code_comments()
        if ISSUE_NUMBER.search(line) or OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_comment_scan_sees_comments_and_docstrings(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('"""Doc (issue 9)."""\n\nx = 1  # see wire-facts\n')
    assert [n for n, _ in _comment_lines(source)] == [3, 1]
