"""The compiled C helpers are loaded only from this user's own cache: a library planted where the
cache points (XDG_CACHE_HOME set to a shared directory, a symlink, another user's file) would run as
the user who correlates, often root. There, the library is built privately for the process instead."""

import os
import tempfile
from pathlib import Path

import pytest

from mwinv import native
from mwinv.kernel_trace import ringwalk

SOURCE = Path(ringwalk.__file__).with_name("ringwalk.c")
NOBODY = 65534
BUILT = []   # where each library was built


def _fresh(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    BUILT.clear()
    (tmp_path / "private").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "private"))
    build = native._build
    monkeypatch.setattr(native, "_build", lambda source, so, needs: (BUILT.append(so), build(source, so, needs)))
    assert native.compiled(SOURCE, "the test").ring_walk   # built and loaded from the private cache
    cache = tmp_path / "cache" / "mwinv"
    assert cache.stat().st_mode & 0o777 == 0o700
    return next(cache.glob("ringwalk-*.so"))


def _plant(path: Path) -> None:
    """Not a library: dlopen() of it fails, so a test that gets a library did not load it."""
    path.unlink()
    path.write_bytes(b"planted")


def _loads_its_own(tmp_path) -> None:
    assert native.compiled(SOURCE, "the test").ring_walk
    assert BUILT[-1].parent.parent == tmp_path / "private"   # built in a private directory of its own
    assert not list((tmp_path / "private").iterdir())        # removed once loaded


def test_a_library_in_a_cache_others_can_write_is_not_loaded(tmp_path, monkeypatch):
    so = _fresh(tmp_path, monkeypatch)
    _plant(so)
    so.chmod(0o666)
    _loads_its_own(tmp_path)
    assert so.read_bytes() == b"planted"   # left alone, never built over
    so.chmod(0o644)
    so.parent.chmod(0o777)
    _loads_its_own(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user")
def test_a_library_planted_by_another_user_or_linked_is_not_loaded(tmp_path, monkeypatch):
    so = _fresh(tmp_path, monkeypatch)
    _plant(so)
    os.chown(so, NOBODY, NOBODY)
    _loads_its_own(tmp_path)
    so.unlink()
    (tmp_path / "elsewhere.so").write_bytes(b"planted")
    so.symlink_to(tmp_path / "elsewhere.so")
    _loads_its_own(tmp_path)
    os.chown(so.parent, NOBODY, NOBODY)   # a cache directory another user owns
    so.unlink()
    _loads_its_own(tmp_path)
