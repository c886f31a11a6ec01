"""The project's C helpers (a .c file next to the module that calls it), compiled with gcc on first use
into the user's cache and loaded with ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from mwinv.errors import MwinvError


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mwinv"


def _ours(path: Path, directory: bool) -> bool:
    """`path` is this user's own directory or file, no symlink, that no other user can write: a library
    loaded from it runs as this user (root's cache set to /tmp would run what another user planted)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    kind = stat.S_ISDIR if directory else stat.S_ISREG
    return kind(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _build(source: Path, so: Path, needs: str) -> None:
    tmp = so.with_suffix(f".{os.getpid()}.tmp")
    try:
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp), str(source)],
                       check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise MwinvError(f"{needs} needs a C compiler: install gcc (scripts/deps.sh)") from None
    except subprocess.CalledProcessError as exc:
        raise MwinvError(f"{source}: gcc failed: {exc.stderr.strip().splitlines()[0]}") from None
    tmp.replace(so)  # atomic: concurrent first uses never load half a library


def compiled(source: Path, needs: str) -> ctypes.CDLL:
    """The library built from `source` (one build per version of its text) in this user's cache; where
    that is not this user's own (another user's HOME, a shared XDG_CACHE_HOME, a planted file), built
    in a private directory of its own for this process and loaded from there. `needs`: what uses it,
    for the error when there is no compiler."""
    name = f"{source.stem}-{hashlib.sha1(source.read_bytes()).hexdigest()[:12]}.so"
    cache = _cache_dir()
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        pass
    if _ours(cache, directory=True):
        if not os.path.lexists(cache / name):
            _build(source, cache / name, needs)
        if _ours(cache / name, directory=False):
            return ctypes.CDLL(str(cache / name))
    private = Path(tempfile.mkdtemp(prefix="mwinv-native-"))   # 0700, a new name
    try:
        _build(source, private / name, needs)
        return ctypes.CDLL(str(private / name))   # loaded: the file is no longer needed
    finally:
        shutil.rmtree(private, ignore_errors=True)
