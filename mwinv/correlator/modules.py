"""The analysis as modules: every derived table is built by one module — an SQL file in `sql/`, or a
named Python step where the work is a stateful walk SQL cannot do — whose header declares what it
builds, what it reads and the variables it uses. A session's runner (`Modules`) orders the modules by
their inputs and builds each once; a table is never rebuilt over itself, and a module that writes a
table another module builds, or reads a table it does not declare, is refused when the modules load.

Header of an SQL module (tests/test_sql_files.py checks every file):

    -- <name>: what it is
    -- builds:  the tables, views or table macros it creates (CREATE TABLE / VIEW / MACRO, never OR REPLACE)
    -- inputs:  the tables it reads (text in parentheses is commentary); the variable(s) a, b
    -- slice:   pid   (optional: time-local per node and pid, run once per time slice of the points)
    -- slice:   statement   (optional: per statement, run once per slice of the statements' starts)
    -- slice:   range   (optional: per statement, run once over the statements a correlation attributes)
    -- scope:   request   (optional: built for one request, e.g. the statements advised, dropped after)
    -- columns: its columns

A table macro `m(inputs)` reads a model's inputs as query_table(inputs || '_statement') etc.: the
same SQL over the capture's (`m('model')`: model_statement, model_attribution, model_statement_io) and
over the advice's examples (`m('advice')`), each name with one meaning.

A `scope: request` module is built inside `Modules.request(...)` (its variables: the request's, e.g. the
statement ids the advice is for) and dropped when the request ends; what the request keeps is copied
out of it. A session-scoped module it reads is built in the session, once.

A sliced module is run once per slice of its kind (`Modules.slices(kind)`, the variables slice_lo and
slice_hi; NULL: open-ended): its first slice creates its table, every later one appends to it. `slice:
pid`: a time slice of the point stream (the segment walk and its per-slice sums). `slice: statement`:
the statements whose slice key (sql/slice_statement.sql: its start, a parallel worker's leader's) lies
in the slice, so that a per-statement module's joins hold one slice's statements, not the capture's;
its inputs are in about that key's order, so a slice's scan skips the others' row groups. `slice:
range`: one slice, the statements this correlation attributes (a capture correlated in parts: this
part's), for a per-statement module whose joins hold nothing per statement it reads.

`python -m mwinv.correlator.modules --graph` prints the module graph docs/architecture.md shows."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"
FIELDS = ("builds", "inputs", "slice", "scope", "columns")
SLICES = ("pid", "statement", "range")
SCOPES = ("session", "request")


@dataclass(frozen=True)
class Module:
    name: str
    builds: tuple[str, ...]
    inputs: tuple[str, ...]
    variables: tuple[str, ...] = ()
    slice: str | None = None
    scope: str = "session"          # "request": built per request (Modules.request), dropped after
    sql: str | None = None          # an SQL module's text
    step: Callable | None = None    # a Python step: step(db) builds its tables; sliced: step(db, bounds)
    #                                 yields once per slice, its slice's rows then in its tables
    where: str = ""                 # its file, or its function's qualified name

    @property
    def is_python(self) -> bool:
        return self.step is not None

    @property
    def is_macro(self) -> bool:
        """A table macro: it reads its inputs when called, so building it needs only the macros it calls."""
        return self.sql is not None and bool(re.search(r"\bCREATE\s+MACRO\b", _strip(self.sql), re.I))


class ModuleError(Exception):
    """A module whose header contradicts its SQL or another module: a defect of the code, not of a
    capture."""


def header(text: str, where: str) -> dict[str, str]:
    """The header fields of an SQL module (a field goes on over the lines indented under it)."""
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:]
        m = re.match(r" (\w+): +(.*)$", body)
        if m and m.group(1) in FIELDS:
            key = m.group(1)
            out[key] = m.group(2)
        elif key and body.startswith("   "):
            out[key] += " " + body.strip()
        else:
            key = None
    if "builds" not in out or "inputs" not in out:
        raise ModuleError(f"{where}: its header declares no builds: or inputs:")
    return out


def _names(text: str) -> tuple[str, ...]:
    """The identifiers of a list, commentary in parentheses left out."""
    while "(" in text:
        stripped = re.sub(r"\([^()]*\)", "", text)
        if stripped == text:
            break
        text = stripped
    return tuple(n for n in (p.strip() for p in text.split(",")) if n)


def _inputs(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tables, variables) of an inputs: field: 'a, b (why); the variable(s) x, y'."""
    tables, _, variables = text.partition(";")
    variables = re.sub(r"^\s*the variables?\s+", "", variables)
    return _names(tables), _names(variables)


def from_sql(path: Path) -> Module:
    text = path.read_text()
    h = header(text, str(path))
    tables, variables = _inputs(h["inputs"])
    sliced = h.get("slice", "").strip() or None
    if sliced is not None and sliced not in SLICES:
        raise ModuleError(f"{path}: slice: {sliced} (known: {', '.join(SLICES)})")
    scope = h.get("scope", "session").strip()
    if scope not in SCOPES:
        raise ModuleError(f"{path}: scope: {scope} (known: {', '.join(SCOPES)})")
    return Module(path.stem, _names(h["builds"]), tables, variables, sliced, scope, sql=text, where=str(path))


_STEPS: list[Module] = []


def step(builds: tuple[str, ...], inputs: tuple[str, ...], variables: tuple[str, ...] = (),
         slice: str | None = None):
    """Declare a Python function as the module that builds `builds` from `inputs`."""
    def register(fn):
        _STEPS.append(Module(fn.__name__, builds, inputs, variables, slice, step=fn,
                             where=f"{fn.__module__}.{fn.__qualname__}"))
        return fn
    return register


def _strip(sql: str) -> str:
    """The SQL without its comments and string literals."""
    sql = re.sub(r"--[^\n]*", " ", sql)
    return re.sub(r"'(?:[^']|'')*'", "''", sql)


def referenced(sql: str) -> tuple[set[str], set[str]]:
    """(tables read, tables created) by an SQL text: the names after FROM and JOIN that are not its
    CTEs' and after CREATE TABLE/VIEW (a check, not a parser: a name in a comma join is not seen)."""
    body = _strip(sql)
    created = set(re.findall(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW|MACRO)\s+(\w+)", body, re.I))
    local = set(re.findall(r"\b(\w+)\s+AS\s*(?:MATERIALIZED\s*)?\(", body, re.I))
    read = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)\b", body, re.I))
    # a macro over a model's inputs reads query_table(inputs || '_statement'): the capture's model_statement
    read |= {f"model_{t}" for t in re.findall(r"query_table\(\s*inputs\s*\|\|\s*'_(\w+)'\s*\)",
                                             re.sub(r"--[^\n]*", " ", sql))}
    return read - local - created, created


def check(modules: list[Module], known_tables: set[str]) -> None:
    """Refuse a table built twice, a capture table built over, an SQL module whose statements create
    other tables than it declares or that reads a known table it does not declare, or a cycle."""
    builder: dict[str, Module] = {}
    for m in modules:
        for t in m.builds:
            if t in builder:
                raise ModuleError(f"{m.where}: builds {t}, which {builder[t].where} builds")
            builder[t] = m
    for m in modules:
        if capture := set(m.builds) & known_tables:
            raise ModuleError(f"{m.where}: builds the capture's table {sorted(capture)[0]}")
        if m.sql is None:
            continue
        if re.search(r"\bCREATE\s+OR\s+REPLACE\b", _strip(m.sql), re.I):
            raise ModuleError(f"{m.where}: CREATE OR REPLACE (a derived table is built once)")
        read, created = referenced(m.sql)
        if created != set(m.builds):
            raise ModuleError(f"{m.where}: creates {sorted(created)}, its header says builds {list(m.builds)}")
        undeclared = (read & (known_tables | set(builder))) - set(m.inputs)
        if undeclared:
            raise ModuleError(f"{m.where}: reads {', '.join(sorted(undeclared))}, not among its inputs")
        unknown = set(m.inputs) - known_tables - set(builder) - read
        if unknown:
            raise ModuleError(f"{m.where}: declares inputs it does not read: {', '.join(sorted(unknown))}")
    try:
        order(modules)
    except CycleError as exc:
        raise ModuleError(f"modules depend on each other in a cycle: {exc.args[1]}") from None


def order(modules: list[Module]) -> list[Module]:
    """The modules, each after those that build its inputs (ties by name: one order every run)."""
    builder = {t: m.name for m in modules for t in m.builds}
    graph = TopologicalSorter({m.name: {builder[i] for i in m.inputs if i in builder} for m in modules})
    by_name = {m.name: m for m in modules}
    graph.prepare()
    out = []
    while graph.is_active():
        ready = sorted(graph.get_ready())
        out += [by_name[n] for n in ready]
        graph.done(*ready)
    return out


def load_modules() -> list[Module]:
    """Every module of the correlator: the SQL files and the Python steps (imported to register), checked."""
    from mwinv.capture.tables import DERIVED_TABLES, SCHEMAS
    from mwinv.correlator import attribution, links  # noqa: F401  (their steps register)

    modules = [from_sql(p) for p in sorted(SQL_DIR.glob("*.sql"))] + list(_STEPS)
    # the capture's tables, the typed statement view load.open_capture makes, and the tables a derived
    # table is read back from (a merge reads its nodes' attribution)
    known = (set(SCHEMAS) - set(DERIVED_TABLES)) | {"statement_typed"}
    check(modules, known)
    return modules


_LOADED: list[Module] | None = None


def modules() -> list[Module]:
    global _LOADED
    if _LOADED is None:
        _LOADED = load_modules()
    return _LOADED


def sql_literal(value) -> str:
    """A variable's value as SQL: bool, int, float, str, None, or a list or dict of those."""
    from mwinv.correlator.load import literal

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(sql_literal, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {sql_literal(v)}" for k, v in value.items()) + "}"
    return literal(value)


@dataclass
class Modules:
    """A session's runner: what it holds (the capture's tables and those provided from elsewhere), the
    variables the modules read, and which modules it has built."""
    db: object
    available: set[str]
    variables: dict[str, object] = field(default_factory=dict)
    slices: Callable[[str], list[tuple[int | None, int | None]]] = lambda kind: [(None, None)]
    built: list[str] = field(default_factory=list)   # module names in the order they ran
    # per sliced table, the SQL of rows added after its slices (an earlier part's, incremental.py)
    seeds: dict[str, str] = field(default_factory=dict)

    parent: "Modules | None" = None   # a request's: the session it runs in
    # seconds each module took (a sliced one's summed over its slices) and each derived table's writing:
    # mwinv-correlate --profile; a request's go to its session's
    timings: dict[str, float] = field(default_factory=dict)

    def holds(self, table: str) -> bool:
        return table in self.available

    @contextmanager
    def request(self, **variables):
        """A request's runner: it builds `scope: request` modules with these variables (and what they
        read from the session, in the session), and drops them at the end."""
        req = Modules(self.db, set(self.available), {**self.variables, **variables}, self.slices, parent=self,
                      timings=self.timings)
        try:
            yield req
        finally:
            from mwinv.correlator.load import session_tables

            kinds = dict(self.db.sql("SELECT table_name, table_type FROM information_schema.tables").fetchall())
            names = [t for m in reversed([m for m in modules() if m.name in req.built]) for t in reversed(m.builds)]
            for t in names:
                if t in session_tables(self.db):
                    kind = {"VIEW": "VIEW", "BASE TABLE": "TABLE"}.get(kinds.get(t), "MACRO TABLE")
                    self.db.con.execute(f"DROP {kind} {t}")

    def provide(self, table: str) -> None:
        """A table the session holds from elsewhere (read back from the capture): no module builds it."""
        self.available.add(table)

    def build(self, *tables: str) -> None:
        """Build `tables` and what they need, each module once, in order of their inputs."""
        all_modules = modules()
        builder = {t: m for m in all_modules for t in m.builds}
        needed: dict[str, Module] = {}

        def need(table: str) -> None:
            if table in self.available or table not in builder:
                if table not in self.available:
                    raise ModuleError(f"no module builds {table} and the session does not hold it")
                return
            m = builder[table]
            if (m.scope == "request") != (self.parent is not None):
                if self.parent is None:
                    raise ModuleError(f"{m.where}: built per request (Modules.request), not in the session")
                self.parent.build(table)   # a request reads the session's tables: built there, once
                self.available.add(table)
                return
            if m.name not in needed:
                needed[m.name] = m
                for i in m.inputs:
                    if not m.is_macro or (i in builder and builder[i].is_macro):
                        need(i)

        for t in tables:
            need(t)
        todo = [m for m in order(all_modules) if m.name in needed]
        while todo:
            m = todo[0]
            if m.slice is None:
                self._run(m)
                todo.pop(0)
                continue
            # the sliced modules of a kind run together, slice by slice, once what they read from outside
            # is built
            group = self._slice_group([s for s in todo if s.slice == m.slice], all_modules)
            for s in todo:
                if s.slice is None and any(t in s.builds for g in group for t in g.inputs):
                    self._run(s)
            self._run_sliced(group)
            todo = [s for s in todo if s.name not in self.built]

    def _slice_group(self, group: list[Module], all_modules: list[Module]) -> list[Module]:
        """The sliced modules needed, with every other sliced module that reads what they make per
        slice: a slice's intermediate rows (the segment walk's) exist only while it runs, so all that
        read them run in the same pass."""
        group = list(group)
        while True:
            made = {t for g in group for t in g.builds}
            more = [m for m in all_modules if m.slice == group[0].slice and m not in group and m.name not in self.built
                    and set(m.inputs) & made and set(m.inputs) <= made | self.available | self._outside(m)]
            if not more:
                return [m for m in order(all_modules) if m in group]
            group += more

    def _outside(self, m: Module) -> set[str]:
        """m's inputs that non-sliced modules build (run before the slices)."""
        return {i for i in m.inputs for b in modules() if i in b.builds and b.slice is None}

    def _set_variables(self, m: Module) -> None:
        for v in m.variables:
            if v not in self.variables:
                raise ModuleError(f"{m.where}: the variable {v} is not set in this session")
            self.db.con.execute(f"SET VARIABLE {v} = {sql_literal(self.variables[v])}")

    def _fresh(self, m: Module) -> None:
        from mwinv.correlator.load import session_tables

        if clash := set(m.builds) & (session_tables(self.db) | self.available):
            raise ModuleError(f"{m.where}: {sorted(clash)[0]} exists already (a derived table is built once)")

    def timed(self, name: str, seconds: float) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    def _run(self, m: Module) -> None:
        self._fresh(m)
        self._set_variables(m)
        t0 = time.monotonic()
        if m.is_python:
            m.step(self.db)
        else:
            self.db.con.execute(m.sql)
        self.timed(m.name, time.monotonic() - t0)
        self.available.update(m.builds)
        self.built.append(m.name)

    def _run_sliced(self, group: list[Module]) -> None:
        bounds = self.slices(group[0].slice)
        for m in group:
            self._fresh(m)
        walks: dict[str, Iterator] = {m.name: m.step(self.db, bounds) for m in group if m.is_python}
        try:
            for i, (lo, hi) in enumerate(bounds):
                self.variables.update(slice_lo=lo, slice_hi=hi)
                for m in group:
                    self._set_variables(m)
                    t0 = time.monotonic()
                    if m.is_python:
                        next(walks[m.name])
                    else:   # the first slice creates the table, the others append to it
                        self.db.con.execute(m.sql if i == 0 else _appending(m))
                    self.timed(m.name, time.monotonic() - t0)
        finally:
            for w in walks.values():
                w.close()
        for m in group:   # rows an earlier correlation of the capture left to this one (incremental.py)
            for t in m.builds:
                if t in self.seeds:
                    self.db.con.execute(f"INSERT INTO {t} BY NAME {self.seeds[t]}")
        for m in group:   # a Python step's slice rows are gone (the walk ended): its tables are the others'
            if not m.is_python:
                self.available.update(m.builds)
            self.built.append(m.name)


def _appending(m: Module) -> str:
    sql, n = re.subn(rf"\bCREATE\s+TABLE\s+{m.builds[0]}\s+AS\b", f"INSERT INTO {m.builds[0]}", m.sql, count=1,
                     flags=re.I)
    if n != 1 or len(m.builds) != 1:
        raise ModuleError(f"{m.where}: a sliced module builds one table, with CREATE TABLE ... AS")
    return sql


def graph(all_modules: list[Module] | None = None) -> str:
    """The module graph as text: per module in build order, what it builds and reads."""
    lines = []
    for m in order(all_modules or modules()):
        kind = "python" if m.is_python else "sql"
        tags = (f" [{kind}" + (f", per {m.slice} slice" if m.slice else "")
                + (f", per {m.scope}" if m.scope != "session" else "") + "]")
        built = ", ".join(m.builds) if m.builds != (m.name,) else m.name
        lines.append(f"{built}{tags} <- {', '.join(m.inputs) or '-'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--graph"]:
        print("usage: python -m mwinv.correlator.modules --graph   # the module graph, in build order",
              file=sys.stderr)
        return 2
    from mwinv.correlator import modules as imported   # run as __main__: the steps register in the package's

    sys.stdout.write(imported.graph())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
