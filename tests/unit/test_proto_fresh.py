"""The committed generated code must match proto/ (run `make proto` after editing it)."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proto")
    subprocess.run(
        ["bash", str(ROOT / "scripts/gen_proto.sh"), str(out)],
        check=True,
        cwd=ROOT,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    return out


@pytest.mark.parametrize("package", ["xmtp", "xnode_api"])
def test_generated_protobuf_code_is_fresh(generated: Path, package: str) -> None:
    fresh, committed = _files(generated / package), _files(ROOT / "src" / package)
    assert sorted(fresh) == sorted(committed), "run `make proto`: generated file set differs"
    stale = [
        name
        for name, path in fresh.items()
        if not filecmp.cmp(path, committed[name], shallow=False)
    ]
    assert not stale, f"run `make proto`: stale generated files {stale}"
