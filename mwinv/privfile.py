"""Captures, reports and experiment outputs hold SQL text with its literals (passwords too): their
directories are 0700 and their files 0600 whatever the umask, or 0750/0640 with the group that
$MWINV_GROUP names (`--group` of the capturing and reporting commands sets it, and the processes a
command starts inherit it). New files are created exclusively and no symlink is followed."""

from __future__ import annotations

import contextlib
import grp
import os
import stat
from pathlib import Path
from typing import IO, Iterator

from mwinv.errors import MwinvError, is_disk_full

GROUP_ENV = "MWINV_GROUP"


def set_group(name: str | None) -> None:
    """Share what this process and its children write with group `name` (checked now)."""
    if name:
        _gid(name)
        os.environ[GROUP_ENV] = name


def _gid(name: str) -> int:
    try:
        return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
    except KeyError:
        raise MwinvError(f"--group {name}: no such group") from None


def _group() -> int | None:
    name = os.environ.get(GROUP_ENV)
    return _gid(name) if name else None


def _restrict(fd: int, directory: bool) -> None:
    """The private mode (and the sharing group) on an open file or directory, when it is ours."""
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        return
    gid = _group()
    if gid is not None and st.st_gid != gid:
        os.fchown(fd, -1, gid)
    os.fchmod(fd, (0o700 if directory else 0o600) | (0 if gid is None else 0o050 if directory else 0o040))


def make_dir(path: str | os.PathLike) -> Path:
    """`path` and its missing parents, made private. An existing directory keeps its mode (its owner
    chose it: /tmp given as the output directory stays /tmp); a symlink in its place is refused (a
    planted one would lead the writes elsewhere)."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    _trusted(p)
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:   # another writer of the same capture made it meanwhile
            continue
        except OSError as exc:   # a capture shared with this user's group is theirs to read only
            raise MwinvError(f"{p}: cannot create ({exc.strerror})") from None
        _directory(p, restrict=True)
    _directory(path, restrict=False)
    return path


def _trusted(path: Path) -> None:
    """No other user may replace `path` or a directory above it (with a symlink to elsewhere): each, and
    a symlink on the way, is ours or root's, and one others may write to has the sticky bit (as /tmp)."""
    for p in (Path(os.path.abspath(path)), *Path(os.path.abspath(path)).parents):
        st = os.stat(p)
        if os.lstat(p).st_uid not in (0, os.geteuid()) or st.st_uid not in (0, os.geteuid()) \
                or st.st_mode & (stat.S_IWOTH | stat.S_ISVTX) == stat.S_IWOTH:
            raise MwinvError(f"{p}: owned by uid {st.st_uid} or writable by every user: not a place for a "
                             "capture or a report (another user could move it or plant a link in it)")


def _directory(path: Path, restrict: bool) -> None:
    """`path` is a directory, not a symlink; `restrict`: made private."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise MwinvError(f"{path}: not a directory ({exc.strerror}; a symlink is not followed)") from None
    try:
        if restrict:
            _restrict(fd, directory=True)
    finally:
        os.close(fd)


def _open(path: Path, flags: int, binary: bool) -> IO:
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise MwinvError(f"{path}: exists already (a new file is never written through an old one)") from None
    except OSError as exc:
        raise MwinvError(f"{path}: {exc.strerror}") from None
    try:
        _restrict(fd, directory=False)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, ("a" if flags & os.O_APPEND else "w") + ("b" if binary else ""))


def create(path: str | os.PathLike, binary: bool = True) -> IO:
    """A new file, private, opened for writing (an existing name, even a dangling symlink: an error)."""
    return _open(Path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, binary)


def append(path: str | os.PathLike, binary: bool = False) -> IO:
    """A private file opened for appending, created when missing (a lock file, a side file)."""
    return _open(Path(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, binary)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, binary: bool = True, tmp: Path | None = None) -> Iterator[IO]:
    """A new private file that replaces `path` atomically when the block ends without an error (a crash
    never leaves half a file); `tmp`: its name meanwhile (default `path`.tmp), one left by a crash removed."""
    path = Path(path)
    tmp = tmp or path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        with create(tmp, binary) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):   # what was written before stays; this file was never half written
            raise MwinvError(f"no space left on device writing {path}") from None
        raise


def write(path: str | os.PathLike, data: str | bytes) -> Path:
    """`data` into `path` (replaced atomically), private."""
    with replacing(path, binary=isinstance(data, bytes)) as f:
        f.write(data)
    return Path(path)


def restrict(path: str | os.PathLike) -> Path:
    """Make a file another program wrote (perf, DuckDB's COPY) private, without following a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _restrict(fd, directory=False)
    finally:
        os.close(fd)
    return Path(path)
