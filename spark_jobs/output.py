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


def write_json_atomic(target: str | Path, document: dict[str, Any]) -> Path:
    """Writes, fsyncs and renames; os.replace is atomic within one filesystem."""
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1, sort_keys=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
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
