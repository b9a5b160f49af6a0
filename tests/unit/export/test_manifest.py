"""The export's signed manifest (xnode.export.manifest): an export reads as its node's only
while every file below the part read is the one the node signed. Tampering is generated:
a file added, removed, changed or renamed, the manifest re-signed by another node."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xnode.core.crypto import SigningKey
from xnode.export.manifest import (
    MANIFEST_FILE,
    ManifestError,
    read_manifest,
    sign_manifest,
    verify_export,
)

NODE, OTHER = SigningKey(b"\x01" * 32), SigningKey(b"\x02" * 32)
FILES = {
    "misbehavior_reports/day=2027-01-01/id-1-2.parquet": b"reports one",
    "misbehavior_reports/day=2027-01-02/id-3-3.parquet": b"reports two",
    "nodes.parquet": b"the registry as the node saw it",
    "_export_state.json": b"{}",
}
READ = ["misbehavior_reports"]


def export(root: Path, key: SigningKey = NODE, node_id: int = 100) -> Path:
    directory = root / f"node-{node_id}"
    for name, data in FILES.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    (directory / MANIFEST_FILE).write_text(sign_manifest(directory, node_id, key, 7))
    return directory


def test_an_export_as_signed_verifies_and_lists_every_file(tmp_path: Path) -> None:
    directory = export(tmp_path)
    verify_export(directory, 100, [NODE.public_key], READ)
    manifest = read_manifest(directory, [NODE.public_key])
    assert (manifest.node_id, manifest.signed_at_ns) == (100, 7)
    assert sorted(manifest.files) == sorted(FILES)


def tamper(directory: Path, how: str, name: str) -> str:
    """Changes the export after signing; returns what the refusal must name."""
    path = directory / name
    if how == "change":
        path.write_bytes(path.read_bytes() + b"!")
        return f"{path}: differs from the node's signed manifest"
    if how == "remove":
        path.unlink()
        return f"{path}: in the signed manifest but missing (removed)"
    if how == "add":
        added = path.with_name("forged.parquet")
        added.write_bytes(b"a report of the operator's")
        return f"{added}: not in the node's signed manifest (added)"
    renamed = path.with_name("renamed.parquet")
    path.rename(renamed)
    return f"{renamed}: not in the node's signed manifest (added)"


@settings(max_examples=60, deadline=None)
@given(
    how=st.sampled_from(["change", "remove", "add", "rename"]),
    name=st.sampled_from([n for n in FILES if n.startswith("misbehavior_reports/")]),
)
def test_any_change_below_what_is_read_is_refused_by_name(how: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        directory = export(Path(root))
        named = tamper(directory, how, name)
        with pytest.raises(ManifestError) as refused:
            verify_export(directory, 100, [NODE.public_key], READ)
        assert str(refused.value) == named


def test_a_manifest_signed_by_another_key_or_of_another_node_is_refused(tmp_path: Path) -> None:
    by_other = export(tmp_path / "a", key=OTHER)
    with pytest.raises(ManifestError, match="not signed by the registry key of node 100"):
        verify_export(by_other, 100, [NODE.public_key], READ)
    moved = export(tmp_path / "b", node_id=200)  # node 200's export passed off as 100's
    with pytest.raises(ManifestError, match="the manifest is node 200's, not node 100's"):
        verify_export(moved, 100, [NODE.public_key], READ)
    unsigned = export(tmp_path / "c")
    (unsigned / MANIFEST_FILE).unlink()
    with pytest.raises(ManifestError, match="no signed manifest"):
        verify_export(unsigned, 100, [NODE.public_key], READ)
    (unsigned / MANIFEST_FILE).write_text('{"manifest": "{}", "signature": "0x00"}')
    with pytest.raises(ManifestError, match="not a manifest"):
        verify_export(unsigned, 100, [NODE.public_key], READ)
