"""Atomic outputs: everything is written beside the target, then renamed into place, so a
reader (or `xnode prune`) sees either the old result or the complete new one, never a part."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _normal_mode(path: Path, directory: bool) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; results are meant to be shared
    (`xnode prune` may run as another user), so give them what open/mkdir would have."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def dumps_json(document: dict[str, Any]) -> str:
    """One top-level key per line and one list item per line: readable, diffable, and a
    plan with 500k ranges stays ~60 bytes per range rather than five indented lines each."""
    lines = []
    for key, value in document.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(item) for item in value)
            body = f"[\n  {items}\n ]"
        else:
            body = json.dumps(value)
        lines.append(f" {json.dumps(key)}: {body}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_json_atomic(target: str | Path, document: dict[str, Any]) -> Path:
    """Writes, fsyncs and renames; os.replace is atomic within one filesystem."""
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps_json(document))
            handle.flush()
            os.fsync(handle.fileno())
        _normal_mode(Path(temp), directory=False)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def atomic_directory(target: str | Path) -> Iterator[Path]:
    """Yields an empty temporary directory beside `target`; on success it becomes `target`.

    An existing `target` is moved aside first and deleted after the swap (a directory cannot
    be atomically replaced by rename), so readers never see a mix of old and new files. On
    failure the temporary directory is removed and `target` is left untouched.
    """
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    _normal_mode(temp, directory=True)
    try:
        yield temp
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    old: Path | None = None
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
        old.rmdir()
        path.rename(old)
    temp.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
