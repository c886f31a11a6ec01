"""The project's C helpers (a .c file next to the module that calls it), compiled with gcc on first use
into the user's cache and loaded with ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from pathlib import Path

from mwinv.errors import MwinvError


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mwinv"


def compiled(source: Path, needs: str) -> ctypes.CDLL:
    """The library built from `source` (one build per version of its text); `needs`: what uses it,
    for the error when there is no compiler."""
    src = source.read_bytes()
    so = _cache_dir() / f"{source.stem}-{hashlib.sha1(src).hexdigest()[:12]}.so"
    if not so.exists():
        so.parent.mkdir(parents=True, exist_ok=True)
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        try:
            subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp), str(source)],
                           check=True, capture_output=True, text=True)
        except FileNotFoundError:
            raise MwinvError(f"{needs} needs a C compiler: install gcc (scripts/deps.sh)") from None
        except subprocess.CalledProcessError as exc:
            raise MwinvError(f"{source}: gcc failed: {exc.stderr.strip().splitlines()[0]}") from None
        tmp.replace(so)  # atomic: concurrent first uses never load half a library
    return ctypes.CDLL(str(so))
