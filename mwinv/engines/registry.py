"""The engines mwinv knows, each registered once: a package under mwinv/engines/ with an `ENGINE`
(a Registration) in its __init__, or any installed package that names its Registration under the
entry point group `mwinv.engines` (pyproject.toml: `[project.entry-points."mwinv.engines"] toy =
"toy_engine:ENGINE"`). The correlator, the `mwinv` command and the demo ask this registry for an
engine's rules, commands and demo; none of them names an engine, so adding one touches none of them
(tests/toy_engine/ is one, plugged in from outside the package)."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import pkgutil
from dataclasses import dataclass
from typing import Any

from mwinv.errors import MwinvError

ENTRY_POINT_GROUP = "mwinv.engines"
DEFAULT = "postgresql"   # whose rules advise statements no registered engine claims (no `dbms`)


@dataclass(frozen=True)
class Registration:
    """What an engine supplies, each as "module:attribute", imported when first asked for (`load`), so
    that listing the engines imports none of them. Any of them may be missing (None).

    name: the `dbms` value its statements carry in the capture tables; capture: its node-capture
    Engine (mwinv/engines/__init__.py: roles, probes, statement reader, settings); reader: what reads
    its own records (a trace, a log) into a capture's statement / statement_text tables; server: its
    throw-away server class for tests and the demo; rules: its advice rules (a list of mwinv.rules.Rule,
    which replace PostgreSQL's for its statements); cli: its `mwinv <name>` click command; demo:
    demo(scale, capture_dir, console, nodes) running a workload under a capture into capture_dir
    (`mwinv demo --dbms <name>`; nodes > 0 a cluster, where the engine has one, else a MwinvError)."""
    name: str
    capture: str | None = None
    reader: str | None = None
    server: str | None = None
    rules: str | None = None
    cli: str | None = None
    demo: str | None = None

    def load(self, part: str) -> Any:
        """The supplied part ("rules", "cli", ...), imported; None where the engine has none."""
        where = getattr(self, part)
        return None if where is None else _resolve(where)


@functools.cache
def _resolve(where: str) -> Any:
    module, _, attr = where.partition(":")
    obj = importlib.import_module(module)
    for a in attr.split(".") if attr else ():
        obj = getattr(obj, a)
    return obj


@functools.cache
def engines() -> dict[str, Registration]:
    """Every registered engine by name: mwinv's own packages first, then the entry points."""
    import mwinv.engines as package

    found: dict[str, tuple[Registration, str]] = {}

    def add(reg: object, origin: str) -> None:
        if not isinstance(reg, Registration):
            raise MwinvError(f"engine registration {origin} is not a mwinv.engines.registry.Registration")
        if reg.name in found:
            raise MwinvError(f"engine {reg.name!r} registered twice: {found[reg.name][1]} and {origin}")
        found[reg.name] = (reg, origin)

    for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if m.ispkg:
            module = importlib.import_module(f"{package.__name__}.{m.name}")
            if hasattr(module, "ENGINE"):
                add(module.ENGINE, f"{module.__name__}:ENGINE")
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        add(ep.load(), f"entry point {ep.name} = {ep.value}")
    return {name: reg for name, (reg, _) in found.items()}


def rules_for(dbms: str | None) -> list:
    """The advice rules for a statement of engine `dbms`: its own, or the default engine's."""
    reg = engines().get(dbms)
    if reg is None or reg.rules is None:
        reg = engines()[DEFAULT]
    return reg.load("rules")
