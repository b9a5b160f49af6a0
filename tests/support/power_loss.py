"""Power loss for a test's Postgres: a filesystem that loses every write not yet fsynced when
its power is cut, as LazyFS does for Jepsen.

Killing a process (kill -9) cannot show a lost write: the kernel keeps its page cache, and
every write a process made reaches the disk in the end. `LazyFs` is a FUSE passthrough over
a backing directory that remembers, for each file, what its blocks held at its last fsync
(or at mount) before any later write or truncate changed them. A power cut puts those blocks
back and each file back to its synced size: what was fsynced stays, everything else is gone,
as after a real cut with a volatile disk cache. Directory changes (create, rename, unlink)
are kept at once, as a journaling filesystem's metadata are: a file created and never
fsynced comes back empty, as on ext4.

`LazyMount` runs the filesystem in a process of its own (`python -m tests.support.power_loss BACKING
MOUNT`), driven through its standard input: `cut` drops the unsynced writes and fails every
later operation with EIO (the disk is gone); unmounting ends it. `power_cut` kills a set of
processes with SIGKILL, then cuts and unmounts: the node and its Postgres lose power
together.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import mfusepy

from tests.support.waiting import wait_until
from xnode.devtools.postgres import PgCluster, free_port, start_cluster
from xnode.store.migrate import upgrade_to_head

BLOCK = 4096


@dataclass
class _Unsynced:
    """A file's changes since its last fsync: its size then, and what its changed blocks held."""

    synced_size: int
    before: dict[int, bytes] = field(default_factory=dict)


class LazyFs(mfusepy.Operations):  # type: ignore[misc]
    """A passthrough to `backing` whose unsynced writes a power cut drops (`cut`)."""

    use_ns = True

    def __init__(self, backing: Path) -> None:
        self.backing = backing
        self._lock = threading.Lock()
        self._unsynced: dict[str, _Unsynced] = {}  # by path in the filesystem
        self._sync_fds: set[int] = set()  # opened O_SYNC or O_DSYNC: every write is synced
        self._append_fds: set[int] = set()
        self._off = False
        self.synced_files = 0

    # --- the power --------------------------------------------------------------------

    def cut(self) -> tuple[int, int]:
        """Puts every file back as it was at its last fsync; returns (files, bytes) undone.
        Every operation after it fails with EIO."""
        with self._lock:
            self._off = True
            files = undone = 0
            for path, unsynced in self._unsynced.items():
                real = self._real(path)
                try:
                    fd = os.open(real, os.O_WRONLY)
                except FileNotFoundError:
                    continue
                try:
                    size = os.fstat(fd).st_size
                    for block, data in unsynced.before.items():
                        os.pwrite(fd, data, block * BLOCK)
                    os.ftruncate(fd, unsynced.synced_size)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                files += 1
                undone += sum(len(d) for d in unsynced.before.values())
                undone += max(0, size - unsynced.synced_size)
            self._unsynced.clear()
            return files, undone

    def _check_power(self) -> None:
        if self._off:
            raise mfusepy.FuseOSError(errno.EIO)

    def _real(self, path: str) -> str:
        return str(self.backing) + path

    def _before_change(self, path: str | None, start: int, end: int) -> None:
        """Keeps what the blocks of [start, end) held at the last fsync, before they change."""
        if path is None or end <= start:  # an unlinked file: nothing of it survives anyway
            return
        real = self._real(path)
        unsynced = self._unsynced.get(path)
        if unsynced is None:
            unsynced = self._unsynced[path] = _Unsynced(os.stat(real).st_size)
        # Blocks past the synced size need nothing kept: the cut truncates them away.
        blocks = range(start // BLOCK, (min(end, unsynced.synced_size) - 1) // BLOCK + 1)
        missing = [b for b in blocks if b not in unsynced.before]
        if not missing:
            return
        fd = os.open(real, os.O_RDONLY)
        try:
            for block in missing:
                unsynced.before[block] = os.pread(fd, BLOCK, block * BLOCK)
        finally:
            os.close(fd)

    def _synced(self, path: str | None) -> None:
        if path is not None and self._unsynced.pop(path, None) is not None:
            self.synced_files += 1

    # --- files ------------------------------------------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        self._check_power()
        st = os.lstat(self._real(path))
        attrs = {
            key: getattr(st, key)
            for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino")
        }
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> int:
        self._check_power()
        return 0  # the kernel checks permissions (default_permissions)

    def open(self, path: str, fi: Any) -> int:
        self._check_power()
        with self._lock:
            if fi.flags & os.O_TRUNC:
                self._before_change(path, 0, os.stat(self._real(path)).st_size)
            fi.fh = os.open(self._real(path), fi.flags & ~os.O_CREAT)
            self._remember_flags(fi.fh, fi.flags)
        return 0

    def create(self, path: str, mode: int, fi: Any) -> int:
        self._check_power()
        real = self._real(path)
        with self._lock:
            if os.path.exists(real):
                self._before_change(path, 0, os.stat(real).st_size)
            else:
                self._unsynced[path] = _Unsynced(0)
            fi.fh = os.open(real, fi.flags | os.O_CREAT, mode)
            self._remember_flags(fi.fh, fi.flags)
        self._own(real)
        return 0

    def _remember_flags(self, fd: int, flags: int) -> None:
        self._sync_fds.discard(fd)
        self._append_fds.discard(fd)
        if flags & (os.O_SYNC | os.O_DSYNC):
            self._sync_fds.add(fd)
        if flags & os.O_APPEND:
            self._append_fds.add(fd)

    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        self._check_power()
        return os.pread(fi.fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        with self._lock:
            self._check_power()
            if fi.fh in self._append_fds:
                offset = os.fstat(fi.fh).st_size
            self._before_change(path, offset, offset + len(data))
            written = os.pwrite(fi.fh, data, offset)
            if fi.fh in self._sync_fds:
                self._synced(path)
        return written

    def truncate(self, path: str | None, length: int, fh: Any = None) -> int:
        with self._lock:
            self._check_power()
            assert path is not None
            real = self._real(path)
            self._before_change(path, length, max(length, os.stat(real).st_size))
            os.truncate(real, length)
        return 0

    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        with self._lock:
            self._check_power()
            os.fsync(fi.fh)
            self._synced(path)
        return 0

    def flush(self, path: str | None, fi: Any) -> int:
        self._check_power()
        return 0  # a close, which syncs nothing

    def release(self, path: str | None, fi: Any) -> int:
        with self._lock:
            self._sync_fds.discard(fi.fh)
            self._append_fds.discard(fi.fh)
            os.close(fi.fh)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._check_power()
        if times is None:
            os.utime(self._real(path))
        else:
            os.utime(self._real(path), ns=times)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._check_power()
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._check_power()
        os.lchown(self._real(path), uid, gid)
        return 0

    # --- directories: kept at once ----------------------------------------------------

    def readdir(self, path: str, fh: Any) -> list[str]:
        self._check_power()
        return [".", "..", *os.listdir(self._real(path))]

    def opendir(self, path: str) -> int:
        self._check_power()
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: Any) -> int:
        self._check_power()
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._check_power()
        os.mkdir(self._real(path), mode)
        self._own(self._real(path))
        return 0

    def rmdir(self, path: str) -> int:
        self._check_power()
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        with self._lock:
            self._check_power()
            os.unlink(self._real(path))
            self._unsynced.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._lock:
            self._check_power()
            os.rename(self._real(old), self._real(new))
            self._unsynced.pop(new, None)
            for path in [p for p in self._unsynced if p == old or p.startswith(old + "/")]:
                self._unsynced[new + path[len(old) :]] = self._unsynced.pop(path)
        return 0

    def link(self, target: str, source: str) -> int:
        self._check_power()
        os.link(self._real(source), self._real(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        self._check_power()
        os.symlink(source, self._real(target))
        self._own(self._real(target))
        return 0

    def readlink(self, path: str) -> str:
        self._check_power()
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        self._check_power()
        st = os.statvfs(self._real(path))
        return {
            key: getattr(st, key)
            for key in (
                "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                "f_files", "f_flag", "f_frsize", "f_namemax",
            )
        }  # fmt: skip

    def _own(self, real: str) -> None:
        """What a process creates is its user's, not this filesystem's (root)."""
        uid, gid, _ = mfusepy.fuse_get_context()
        os.lchown(real, uid, gid)


def _serve_commands(fs: LazyFs, commands: IO[str], answers: IO[str]) -> None:
    for line in commands:
        if line.strip() == "cut":
            files, undone = fs.cut()
            answers.write(f"cut {files} {undone}\n")
            answers.flush()


def main(argv: list[str]) -> None:
    backing, mountpoint = Path(argv[0]), argv[1]
    fs = LazyFs(backing)
    threading.Thread(target=_serve_commands, args=(fs, sys.stdin, sys.stdout), daemon=True).start()
    mfusepy.FUSE(
        fs,
        mountpoint,
        raw_fi=True,
        foreground=True,
        allow_other=True,  # Postgres runs as the `postgres` user
        default_permissions=True,
        hard_remove=True,  # no .fuse_hidden files in Postgres's directories
    )


# --- driving it from a test -------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    """What a power cut undid: files put back to their last fsync, and their bytes."""

    files: int
    bytes: int


class LazyMount:
    """`backing` seen at `mountpoint` through a LazyFs of its own process."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log = backing.parent / f"{mountpoint.name}-lazyfs.log"
        self._proc: subprocess.Popen[str] | None = None

    def mount(self) -> None:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.power_loss",
                str(self.backing),
                str(self.mountpoint),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("ab"),
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        proc = self._proc
        wait_until(
            lambda: os.path.ismount(self.mountpoint) or proc.poll() is not None,
            what=f"the lazy filesystem mounted on {self.mountpoint}",
        )
        if proc.poll() is not None:
            raise RuntimeError(
                f"the lazy filesystem ended with code {proc.returncode}: {self.log.read_text()}"
            )

    def cut(self) -> Cut:
        assert self._proc is not None and self._proc.stdin and self._proc.stdout
        self._proc.stdin.write("cut\n")
        self._proc.stdin.flush()
        _, files, undone = self._proc.stdout.readline().split()
        return Cut(int(files), int(undone))

    def unmount(self) -> None:
        if self._proc is None:
            return
        # Always: after a cut the mount answers nothing (EIO), so it does not look mounted.
        subprocess.run(
            ["fusermount3", "-u", "-z", str(self.mountpoint)], check=False, capture_output=True
        )
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(30)
        self._proc = None


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().splitlines()[0])


def power_cut(mount: LazyMount, pids: Iterable[int]) -> Cut:
    """Kills `pids` (and what runs under them) with SIGKILL, then drops every unsynced write
    of `mount` and unmounts it: the machine lost power."""
    doomed = [p for pid in pids for p in descendants(pid)]
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(_alive(p) for p in doomed), what="the killed processes gone")
    cut = mount.cut()
    mount.unmount()
    return cut


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- a node's own Postgres ----------------------------------------------------------------

DATABASE = "xnode"


def make_template(root: Path) -> Path:
    """A stopped cluster made with data checksums, holding the database `xnode` migrated to
    head: copied for each test that needs a cluster of its own (faster than initdb)."""
    data = root / "template"
    cluster = start_cluster(data, fsync=False)
    try:
        cluster.create_database(DATABASE)
        upgrade_to_head(cluster.dsn(DATABASE))
    finally:
        cluster.stop()
    return data


class OwnPostgres:
    """A cluster of its own, a copy of a template, on its own port; with `lazy`, its data
    directory is on a LazyMount whose power a test can cut."""

    def __init__(self, root: Path, template: Path, *, lazy: bool = True) -> None:
        self.backing = root / "disk"
        self.data_dir = root / "data" if lazy else self.backing
        self.sockets = root / "sockets"  # FUSE holds no sockets
        # cp -a: the files stay the `postgres` user's
        subprocess.run(["cp", "-a", str(template), str(self.backing)], check=True)
        self.sockets.mkdir()
        shutil.chown(self.sockets, *_owner(template))
        self.mount = LazyMount(self.backing, self.data_dir) if lazy else None
        self.port = free_port()
        self.cluster: PgCluster | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def power_on(self) -> PgCluster:
        """Mounts the disk and starts Postgres, which recovers from its WAL after a cut."""
        if self.mount is not None:
            self.mount.mount()
        self.cluster = start_cluster(
            self.data_dir, fsync=True, socket_dir=self.sockets, port=self.port
        )
        return self.cluster

    def power_cut(self, *others: int) -> Cut:
        """Postgres and `others` (a node's pid) lose power together."""
        assert self.mount is not None
        cut = power_cut(self.mount, [postmaster_pid(self.backing), *others])
        # No process survives a real cut; here one killed may linger as a zombie whose pid
        # Postgres would take for a running server.
        (self.backing / "postmaster.pid").unlink(missing_ok=True)
        self.cluster = None
        return cut

    def stop(self) -> None:
        if self.cluster is not None:
            try:
                self.cluster.stop()
            except Exception:
                pid = self.backing / "postmaster.pid"
                if pid.exists():
                    for p in descendants(postmaster_pid(self.backing)):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(p, signal.SIGKILL)
            self.cluster = None
        if self.mount is not None:
            self.mount.unmount()


def _owner(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid


if __name__ == "__main__":
    main(sys.argv[1:])
