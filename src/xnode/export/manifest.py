"""The export's signed manifest (docs/export-format.md): every file of `node-<id>/` with its
SHA-256, signed by the node's registry key.

An export is files an operator hands over; without a signature anyone on the way (or the
operator itself, after the fact) could add a registry entry, a report or an envelope row and
have it read as the node's. `xnode export` writes `manifest.json` last, over everything it
wrote; a reader checks the signature against the key the NodeRegistry contract holds for the
node (never a key the export itself names) and the hash of every file it reads, and refuses
an export that fails either, by name."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from xnode.core.crypto import SignatureError, SigningKey, keccak256, recover_public_key

MANIFEST_FILE = "manifest.json"
_DOMAIN = b"export-manifest|"
_CHUNK = 1 << 20
# Not the export's content: the manifest itself, the writer's lock, temporary files.
_SKIPPED = (MANIFEST_FILE, ".export.lock")


class ManifestError(ValueError):
    """Why an export is refused; the message names the file or the signature."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def export_files(node_dir: Path, under: Iterable[str] = ("",)) -> list[str]:
    """The export's content files (relative posix paths), below the given subpaths."""
    found: set[str] = set()
    for sub in under:
        base = node_dir / sub if sub else node_dir
        candidates = [base] if base.is_file() else base.rglob("*") if base.is_dir() else []
        for path in candidates:
            if path.is_file() and not path.name.startswith(".") and path.name not in _SKIPPED:
                found.add(path.relative_to(node_dir).as_posix())
    return sorted(found)


def manifest_digest(unsigned: bytes) -> bytes:
    return keccak256(_DOMAIN, unsigned)


def _unsigned(node_id: int, signed_at_ns: int, files: Mapping[str, str]) -> bytes:
    body = {"node_id": node_id, "signed_at_ns": signed_at_ns, "files": dict(sorted(files.items()))}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_manifest(node_dir: Path, node_id: int, key: SigningKey, signed_at_ns: int) -> str:
    """The manifest text for everything under `node_dir` now, signed by `key`."""
    files = {name: file_sha256(node_dir / name) for name in export_files(node_dir)}
    unsigned = _unsigned(node_id, signed_at_ns, files)
    signature = key.sign(manifest_digest(unsigned))
    return json.dumps({"manifest": unsigned.decode(), "signature": "0x" + signature.hex()})


@dataclass(frozen=True, slots=True)
class Manifest:
    node_id: int
    signed_at_ns: int
    files: Mapping[str, str]  # relative path -> SHA-256 hex


def read_manifest(node_dir: Path, keys: Iterable[bytes]) -> Manifest:
    """The manifest of `node_dir`, once its signature recovers to one of `keys` (the node's
    registry keys); raises ManifestError naming what failed."""
    path = node_dir / MANIFEST_FILE
    try:
        outer = json.loads(path.read_text(encoding="utf-8"))
        unsigned = str(outer["manifest"]).encode()
        signature = bytes.fromhex(str(outer["signature"]).removeprefix("0x"))
        body = json.loads(unsigned)
        manifest = Manifest(
            int(body["node_id"]),
            int(body["signed_at_ns"]),
            {str(k): str(v) for k, v in dict(body["files"]).items()},
        )
    except FileNotFoundError:
        raise ManifestError(f"{path}: no signed manifest (export with this xnode)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: not a manifest ({exc})") from None
    try:
        signer = recover_public_key(signature, manifest_digest(unsigned))
    except SignatureError as exc:
        raise ManifestError(f"{path}: signature does not recover ({exc})") from None
    if signer not in set(keys):
        raise ManifestError(f"{path}: not signed by the registry key of node {manifest.node_id}")
    return manifest


def _below(name: str, part: str) -> bool:
    """`name` is `part` or inside it ("" is the whole export)."""
    return not part or name == part or name.startswith(part.rstrip("/") + "/")


def verify_export(
    node_dir: Path, node_id: int, keys: Iterable[bytes], under: Iterable[str]
) -> None:
    """`node_dir` is node `node_id`'s export as it signed it, for every file below `under`:
    the same files, each with the hash it signed. Raises ManifestError naming the file."""
    manifest = read_manifest(node_dir, keys)
    if manifest.node_id != node_id:
        raise ManifestError(
            f"{node_dir}: the manifest is node {manifest.node_id}'s, not node {node_id}'s"
        )
    parts = list(under)
    present = export_files(node_dir, parts)
    signed = sorted(name for name in manifest.files if any(_below(name, p) for p in parts))
    for name in sorted(set(present) - set(signed)):
        raise ManifestError(f"{node_dir / name}: not in the node's signed manifest (added)")
    for name in sorted(set(signed) - set(present)):
        raise ManifestError(f"{node_dir / name}: in the signed manifest but missing (removed)")
    for name in present:
        if file_sha256(node_dir / name) != manifest.files[name]:
            raise ManifestError(f"{node_dir / name}: differs from the node's signed manifest")
