"""An unprivileged local user for the hostile-user tests: what another user of the host can do to
mwinv's files, rings and commands. Created once (a system user without a home or a login shell),
left in place: creating it is idempotent and it owns nothing but what a test makes."""

from __future__ import annotations

import pwd
import shutil
import subprocess
from dataclasses import dataclass

import pytest

NAME = "mwinv-hostile"
# root's own python3 may live under /root (pyenv), which this user cannot enter
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class HostileUser:
    name: str
    uid: int
    gid: int

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run argv as this user (no capabilities, supplementary groups cleared)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                               "--", *argv], **kw)

    def python(self, code: str, *args: str, **kw) -> subprocess.CompletedProcess:
        """Run a Python snippet as this user (the system interpreter: the project's venv may not be
        readable to it, and a hostile user brings their own tools)."""
        return self.run([SYSTEM_PYTHON, "-c", code, *args], **kw)

    def correlate(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """mwinv-correlate as this user, from the repository and the venv's packages (readable to it or
        skipped): what a member of a capture's group runs."""
        import sysconfig
        from pathlib import Path

        repo, site = Path(__file__).parents[1], sysconfig.get_paths()["purelib"]
        if self.run(["test", "-r", str(repo / "mwinv" / "__init__.py"), "-a", "-r", site]).returncode:
            pytest.skip(f"{repo} or {site} is not readable to other users: they could not run mwinv from it")
        kw.setdefault("timeout", 300)
        return self.run(["env", f"PYTHONPATH={repo}:{site}", SYSTEM_PYTHON, "-c",
                         "import sys; from mwinv.cli.correlate import main; sys.argv[0] = 'mwinv-correlate'; main()",
                         *args], **kw)

    def share(self, root) -> None:
        """root and all below it readable to this user's group, not writable: a capture shared read-only."""
        import os

        for p in [root, *root.rglob("*")]:
            os.chown(p, 0, self.gid)
            p.chmod(0o750 if p.is_dir() else 0o640)


def hostile_user() -> HostileUser:
    """The user, created when missing; skips where that is impossible (not root, no useradd)."""
    if not shutil.which("setpriv") or not shutil.which("useradd"):
        pytest.skip("setpriv or useradd is missing")
    try:
        pw = pwd.getpwnam(NAME)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME],
                       check=True, capture_output=True)
        pw = pwd.getpwnam(NAME)
    return HostileUser(NAME, pw.pw_uid, pw.pw_gid)
