"""The committed generated code must match proto/ (run `make proto` after editing it)."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_protobuf_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts/gen_proto.sh"), str(tmp_path)],
        check=True,
        cwd=ROOT,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    fresh, committed = _files(tmp_path / "xmtp"), _files(ROOT / "src/xmtp")
    assert sorted(fresh) == sorted(committed), "run `make proto`: generated file set differs"
    stale = [
        name
        for name, path in fresh.items()
        if not filecmp.cmp(path, committed[name], shallow=False)
    ]
    assert not stale, f"run `make proto`: stale generated files {stale}"
