"""The shell blocks of README.md and docs/*.md, as the documentation tests read them.

The fence's info string says how a block is tested (like rustdoc's `no_run`):

- ```` ```sh ```` runs as written, from a scratch directory laid out like the checkout;
- ```` ```sh devnet ```` runs the same way against the tests' one shared `xnode devnet`
  (its state directory is the scratch directory's `.xnode`);
- ```` ```sh no-run: REASON ```` is not run (a long-running process, a cluster, a container
  engine, files the reader brings): it must parse as shell, and every command it names must
  exist with the flags it uses.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELLS = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>.*)$")
SEPARATORS = {";", "&&", "||", "|", "&"}
REDIRECTIONS = {">", ">>", "<", ">&", "&>"}
ELIDED = "..."  # a reader's "and the rest of the flags": not an argument


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    mode: str  # "run", "devnet" or "no-run"
    reason: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _mode(info: str) -> tuple[str, str] | None:
    """(mode, reason) of a fence's info string, or None for a block that is not shell."""
    words = info.strip().split(maxsplit=1)
    if not words or words[0] not in SHELLS:
        return None
    rest = words[1].strip() if len(words) > 1 else ""
    if not rest:
        return "run", ""
    if rest == "devnet":
        return "devnet", ""
    if rest.startswith("no-run:") and rest[len("no-run:") :].strip():
        return "no-run", rest[len("no-run:") :].strip()
    raise ValueError(f"unknown shell fence {info.strip()!r}: use sh, sh devnet, sh no-run: WHY")


def blocks_of(path: Path) -> list[Block]:
    found = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, start = match["indent"], i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        try:
            mode = _mode(match["info"])
        except ValueError as exc:
            raise ValueError(f"{path.name}:{start + 1}: {exc}") from None
        if mode is not None:
            body = "\n".join(line.removeprefix(indent) for line in lines[start + 1 : end])
            found.append(Block(path, start + 1, mode[0], mode[1], body + "\n"))
        i = end + 1
    return found


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [block for path in documents(root) for block in blocks_of(path)]


def _without_comment(line: str) -> str:
    # A shell comment starts at a word's start only (`file.tar.gz#name` is one word).
    return re.sub(r"(^|\s)#.*$", "", line)


def commands(text: str) -> list[list[str]]:
    """The simple commands of a block: continuations joined, comments dropped, split at
    ; && || | and &; leading VAR=value assignments, redirections and `...` left out."""
    out: list[list[str]] = []
    for line in text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(_without_comment(line), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        current: list[str] = []
        tokens = iter([*lexer, ";"])
        for token in tokens:
            if token in REDIRECTIONS:
                next(tokens, None)  # its target
                if current and current[-1].isdigit():
                    current.pop()  # the 2 of 2>
            elif token in SEPARATORS:
                words = [w for w in current if w != ELIDED]
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words.pop(0)
                if words:
                    out.append(words)
                current = []
            else:
                current.append(token)
    return out


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (what `page.md#anchor` links land on)."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
