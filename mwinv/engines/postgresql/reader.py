"""Reader of the PostgreSQL extension `mwinv` (dbplugins/postgresql/): drains its shared-memory
ring of per-execution statement records into the capture tables `statement` and
`statement_text` (one text per query id per capture).  A capture on the server's host maps the
ring's file and takes the records itself (MappedRing); elsewhere it drains through SQL.

    drain(conn, capture)                       what is in the ring now -> rows written
    StatementDrainer(conninfo, capture).start() ... .stop()   periodic drain during a capture
"""

from __future__ import annotations

import json
import mmap
import os
import platform
import pwd
import queue
import stat
import struct
import threading
import time
from pathlib import Path
from typing import IO

import numpy as np
import psycopg
import pyarrow as pa

from mwinv import privfile
from mwinv.capture.columns import empty_table, numpy_ints
from mwinv.capture.tables import SCHEMAS, Capture, node_name
from mwinv.engines.postgresql.records import RecordConverter, record_dtype
from mwinv.errors import MwinvError

DRAIN_BATCH = 50_000
MAPPED_WAIT_S = 0.1   # the longest wait between two looks at a mapped ring
SPOOL_MB = 1024   # raw records spooled before they are converted during a capture: 5.6 million
SPOOL_PART_ROWS = 1_000_000   # rows of a part written from a spooled file
MEDIAN_OF = 10_000   # the last records of a spool whose median duration an event budget asks
REMEMBER_S = 0.5   # how often a spooling drainer asks for new query texts (~0.3 ms of CPU a look)


def extension_available(conn: psycopg.Connection) -> bool:
    """True when mwinv is preloaded in this server and its SQL objects exist (created here if the
    extension is installed but not yet created in this database and we may create it)."""
    try:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'mwinv'").fetchone() is None:
            if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'mwinv'").fetchone() is None:
                return False
            conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
        # fails with "must be loaded via shared_preload_libraries" when it is not preloaded
        conn.execute("SELECT * FROM mwinv_info()").fetchone()
        return True
    except psycopg.Error:
        if not conn.autocommit:
            conn.rollback()
        return False


def _server_node(conn: psycopg.Connection) -> str:
    name = conn.execute("SELECT current_setting('mwinv.node_name', true)").fetchone()[0]
    return name or node_name()


def connect_untracked(conninfo: str, **kw) -> psycopg.Connection:
    """A connection whose own statements stay out of the ring (they are no workload); set at
    connection start so that not even the first statement is recorded.  Falls back to a plain
    connection for roles that may not change mwinv.track. kw: psycopg.connect's (connect_timeout)."""
    try:
        return psycopg.connect(conninfo, autocommit=True, options="-c mwinv.track=none", **kw)
    except psycopg.OperationalError as exc:
        if "permission denied" not in str(exc):
            raise
        return psycopg.connect(conninfo, autocommit=True, **kw)


class MappedRing:
    """The extension's ring, mapped from its file in /dev/shm, taken by this process alone while it is
    attached (mwinv_ring_attach): no backend copies records for the reader and nothing crosses a
    socket.  x86-64 only: the slot protocol is followed with plain 8-byte loads and stores, which that
    memory model keeps in program order (a seq read before its record, a record read before its slot
    is freed); elsewhere the reader drains through SQL."""

    HEADER = struct.Struct("<8sIIIIIiQ")
    HEADER_SIZE = 256
    MAX_SLOTS = 16 * 1024 * 1024   # mwinv.buffer_size's maximum
    HEAD, TAIL, DROPPED = 64 // 8, 128 // 8, 192 // 8   # header words

    def __init__(self, path: str, token: int, dtype: np.dtype, owner: int):
        """The file at path, which must be the server's (`owner`: its OS user): a regular file of that user,
        mode 0600, never through a symlink (anyone may make a name in /dev/shm), with a header whose every
        field is checked before the slots are mapped. MwinvError (one line: the file and the field) if not."""
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            header = os.pread(fd, self.HEADER_SIZE, 0)
            nslots, header_size, slot_size, record_offset = self._check(path, st, header, token, dtype, owner)
            self._mm = mmap.mmap(fd, st.st_size)
        finally:
            os.close(fd)
        self.path, self._inode, self.nslots, self.header_size, self.slot_size = (path, st.st_ino, nslots, header_size,
                                                                                 slot_size)
        self._words = np.ndarray((header_size // 8,), np.uint64, self._mm)
        self._seq = np.ndarray((nslots,), np.uint64, self._mm, header_size, (slot_size,))
        # a slot seen as a record whose fields sit record_offset further: runs of slots copy as one block
        slot = np.dtype({"names": list(dtype.names), "formats": [dtype.fields[n][0] for n in dtype.names],
                         "offsets": [dtype.fields[n][1] + record_offset for n in dtype.names], "itemsize": slot_size})
        self.slot = slot
        self._slots = np.ndarray((nslots,), np.dtype((np.void, slot_size)), self._mm, header_size)
        self._pos = int(self._words[self.TAIL])

    @classmethod
    def _check(cls, path: str, st: os.stat_result, header: bytes, token: int, dtype: np.dtype,
               owner: int) -> tuple[int, int, int, int]:
        """nslots, header_size, slot_size, record_offset of a ring file whose owner, mode, size and header
        are those the server makes, else MwinvError naming the field."""
        def bad(what: str) -> MwinvError:
            return MwinvError(f"{path}: not this server's mwinv ring: {what}")

        if not stat.S_ISREG(st.st_mode):
            raise bad("not a regular file")
        if st.st_uid != owner:
            raise bad(f"owner uid {st.st_uid}, the server runs as uid {owner}")
        if stat.S_IMODE(st.st_mode) != 0o600:
            raise bad(f"mode {stat.S_IMODE(st.st_mode):04o}, not 0600")
        if len(header) < cls.HEADER_SIZE:
            raise bad(f"{st.st_size} bytes, shorter than its {cls.HEADER_SIZE}-byte header")
        magic, version, header_size, slot_size, record_offset, nslots, _, file_token = cls.HEADER.unpack_from(header)
        checks = [(magic == b"MWINVRNG", f"magic {magic!r}"), (version == 1, f"version {version}"),
                  (file_token == token % 2**64, "token differs"),
                  (header_size == cls.HEADER_SIZE, f"header size {header_size}"),
                  (0 < nslots <= cls.MAX_SLOTS, f"slot count {nslots}"),
                  (8 <= record_offset and record_offset % 8 == 0, f"record offset {record_offset}"),
                  (slot_size % 8 == 0 and slot_size - record_offset >= dtype.itemsize,
                   f"slot size {slot_size} (record offset {record_offset}, a {dtype.itemsize}-byte record)"),
                  (st.st_size == header_size + nslots * slot_size,
                   f"size {st.st_size}, not {header_size} + {nslots} slots of {slot_size} bytes")]
        for ok, what in checks:
            if not ok:
                raise bad(what)
        return nslots, header_size, slot_size, record_offset

    def _ready(self, max_records: int) -> int:
        """How many records from the tail on are written (a record still being written ends the run)."""
        pos = self._pos
        k = min(int(self._words[self.HEAD]) - pos, max_records, self.nslots)
        if k <= 0:
            return 0
        i = np.arange(k, dtype=np.uint64)
        filled = self._seq[(pos + i) % self.nslots] == pos + 1 + i
        return k if filled.all() else int(np.argmin(filled))

    def _blocks(self, n: int) -> list[slice]:
        """The slots of the next n records: at most two runs (the ring wraps)."""
        a = self._pos % self.nslots
        first = min(n, self.nslots - a)
        return [slice(a, a + first), slice(0, n - first)]

    def _free(self, n: int) -> None:
        """The next n slots are free again for the backends."""
        pos = self._pos
        i = np.arange(n, dtype=np.uint64)
        self._seq[(pos + i) % self.nslots] = pos + self.nslots + i
        self._pos = pos + n
        self._words[self.TAIL] = self._pos

    def take(self, max_records: int) -> np.ndarray:
        """Up to max_records records in ring order (a copy, slot by slot); their slots are free again."""
        n = self._ready(max_records)
        # whole slots in at most two blocks, as bytes: a memory copy (6 ns a record), where copying each
        # record's fields out of its slot cost 0.2 s of the reader's CPU per million records, and
        # concatenating slot-typed arrays, which packs their fields, 69 ns a record
        out = np.concatenate([self._slots[b] for b in self._blocks(n)]).view(self.slot)
        self._free(n)
        return out

    def spool(self, fd: int, max_records: int) -> int:
        """Appends up to max_records whole slots to the file fd, straight from the mapping (one copy by
        the kernel), and frees them; returns how many. The file holds records of dtype `slot`."""
        n = self._ready(max_records)
        view = memoryview(self._mm)
        for b in self._blocks(n):
            chunk = view[self.header_size + b.start * self.slot_size:self.header_size + b.stop * self.slot_size]
            while chunk:
                chunk = chunk[os.write(fd, chunk):]
        view.release()
        self._free(n)
        return n

    @property
    def pending(self) -> int:
        return int(self._words[self.HEAD]) - self._pos

    @property
    def dropped(self) -> int:
        return int(self._words[self.DROPPED])

    def server_alive(self) -> bool:
        """False once the postmaster exited (it removes the file; a new one makes a new file): this
        mapping then gets no records, though reading it needs no connection to notice."""
        try:
            return os.stat(self.path).st_ino == self._inode
        except OSError:
            return False

    def close(self) -> None:
        for name in ("_words", "_seq", "_slots"):
            self.__dict__.pop(name, None)
        self._mm.close()


def attach_ring(conn: psycopg.Connection, dtype: np.dtype) -> tuple[MappedRing | None, str]:
    """The server's ring mapped by this process, or None and why not (then records come through SQL)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"the mapped ring is read on x86-64 only, not {platform.machine()}"
    try:
        path, token, backend = conn.execute("SELECT r.*, pg_backend_pid() FROM mwinv_ring_attach(%s) r",
                                            [os.getpid()]).fetchone()
    except (psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege,
            psycopg.errors.InvalidParameterValue) as exc:
        return None, exc.diag.message_primary or str(exc)
    if path is None:
        return None, "the server keeps its ring in an anonymous mapping (see its log)"
    try:
        owner = _process_uid(backend)
        if owner is None:
            raise MwinvError(f"the server's backend {backend} is not a process on this host")
        return MappedRing(path, token, dtype, owner), ""
    except (OSError, ValueError, MwinvError) as exc:
        conn.execute("SELECT mwinv_ring_detach(%s)", [os.getpid()])
        return None, str(exc)


def _process_uid(pid: int) -> int | None:
    """The effective uid of process pid on this host (None: no such process)."""
    try:
        with open(f"/proc/{int(pid)}/status") as f:
            return next(int(line.split()[2]) for line in f if line.startswith("Uid:"))
    except (OSError, ValueError, StopIteration):
        return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def server_uid() -> int:
    """The OS user mwinv's servers run as (PgServer: postgres under root, else whoever starts them)."""
    if os.geteuid() != 0:
        return os.geteuid()
    try:
        return pwd.getpwnam("postgres").pw_uid
    except KeyError:
        return os.geteuid()


def remove_stale_rings(shm: Path = Path("/dev/shm"), owner: int | None = None) -> list[str]:
    """Ring files (mwinv.<pid>[.<random>]) of postmasters that are gone (killed with -9: a clean exit removes
    its own). Only regular files of the servers' OS user (`owner`, default server_uid()): anyone may make a
    name in /dev/shm, and neither a symlink nor another user's file is the servers' to remove."""
    owner = server_uid() if owner is None else owner
    removed = []
    for path in shm.glob("mwinv.*"):
        try:
            st = path.lstat()
            pid = int(path.name.split(".")[1])
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
            continue
        if _comm(pid) in ("postgres", "postmaster") and _process_uid(pid) == owner:
            continue   # its server is alive
        # /dev/shm is sticky: only the owner or root can swap the name between lstat and unlink
        path.unlink(missing_ok=True)
        removed.append(f"ring file {path}")
    return removed


_NAMES = {"database": "SELECT oid::bigint, datname FROM pg_database",
          "username": "SELECT oid::bigint, rolname FROM pg_roles"}


class _Reader:
    """Takes the records (from the mapped ring, else as raw bytes through SQL) and makes them rows, with
    the texts of query ids this capture does not have yet; with since_ns, only records of statements
    that ended after it (the ring also holds what ran before a capture began)."""

    def __init__(self, conn: psycopg.Connection, capture: Capture, node: str | None, since_ns: int | None = None):
        self.conn = conn
        self.ring: MappedRing | None = None
        try:
            layout = conn.execute('SELECT field, "offset", size FROM mwinv_record_layout()').fetchall()
        except psycopg.errors.UndefinedFunction:
            version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'mwinv'").fetchone()
            raise MwinvError(f"extension mwinv {version[0] if version else '?'} in this database is older than its "
                             "library: ALTER EXTENSION mwinv UPDATE") from None
        self.dtype = record_dtype(layout)
        self.records = RecordConverter(capture, node or _server_node(conn), self._texts, self._names, since_ns)
        self._empty = empty_table(SCHEMAS["statement"])
        self.known_texts: dict[int, str] = {}
        self.known_names: dict[str, dict[int, str]] = {kind: {} for kind in _NAMES}
        self._texts_seen = -1

    def _texts(self, query_ids: list[int]) -> dict[int, str]:
        missing = [q for q in query_ids if q not in self.known_texts]
        if missing:
            self._ask(self.known_texts, "SELECT query_id, query FROM mwinv_texts WHERE query_id = ANY(%s) "
                      "AND query IS NOT NULL", missing)
        return {q: self.known_texts[q] for q in query_ids if q in self.known_texts}

    def _names(self, kind: str, oids: list[int]) -> dict[int, str]:
        known = self.known_names[kind]
        missing = [o for o in oids if o not in known]
        if missing:
            self._ask(known, _NAMES[kind] + " WHERE oid = ANY(%s::oid[])", missing)
        return {o: known[o] for o in oids if o in known}

    def _ask(self, into: dict, sql: str, keys: list[int]) -> None:
        """What the server knows of keys, into `into`; nothing from a server that is gone (records
        converted after it stopped keep the texts and names remember() saw)."""
        try:
            into.update(self.conn.execute(sql, [keys]).fetchall())
        except psycopg.OperationalError:
            pass

    def remember(self) -> dict[int, str] | None:
        """The query texts the server kept since the last look, and its databases' and roles' names (one
        short statement when it kept no new text): records spooled now are converted later, perhaps
        after the server stopped. The new texts, or None when there were none."""
        texts = self.conn.execute("SELECT texts FROM mwinv_info()").fetchone()[0]
        if texts == self._texts_seen:
            return None
        new = dict(self.conn.execute(
            "SELECT query_id, query FROM mwinv_texts WHERE query IS NOT NULL AND query_id <> ALL(%s)",
            [list(self.known_texts)]).fetchall())
        self.known_texts.update(new)
        for kind, sql in _NAMES.items():
            self.known_names[kind].update(self.conn.execute(sql).fetchall())
        self._texts_seen = texts
        return new

    def fetch(self) -> tuple[pa.Table, list[dict]]:
        """Everything in the ring now (as the `statement` table) and the texts of new query ids. The records
        come as raw bytes (from the mapped ring, else mwinv_drain_raw) decoded with numpy: the server
        formats nothing (CSV through COPY cost its backend ~1-2 µs per record) and no record goes
        through Python alone."""
        if self.ring is not None and not self.ring.pending:   # an idle server: 10 looks a second cost 1 % of a core
            return self._empty, []
        tables, texts = [], []
        while True:
            if self.ring is not None:
                recs = self.ring.take(DRAIN_BATCH)
            else:
                raw = self.conn.execute("SELECT mwinv_drain_raw(%s)", [DRAIN_BATCH], binary=True).fetchone()[0]
                recs = np.frombuffer(raw, self.dtype)
            table, new = self.records.convert(recs)
            tables.append(table)
            texts += new
            if len(recs) < DRAIN_BATCH:
                return (tables[0] if len(tables) == 1 else pa.concat_tables(tables)), texts


def drain(conn: psycopg.Connection, capture: Capture, node: str | None = None) -> int:
    """Take every record now in the ring and write it to `capture`; returns the rows written.
    `node` defaults to the server's mwinv.node_name, else this host's node name."""
    try:
        reader = _Reader(conn, capture, node)
        return reader.records.write(*reader.fetch())
    except psycopg.errors.UndefinedFunction:
        raise MwinvError("extension mwinv is not created in this database (CREATE EXTENSION mwinv)") from None
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise MwinvError(f"mwinv: {exc.diag.message_primary}") from None


class Spool:
    """Raw records of a mapped ring in files of the capture directory, converted to rows after the
    capture (or when a file reaches `limit_bytes`): while the capture runs the reader only copies
    slots, ~190 bytes a record, and the cores stay with the workload. Converting live cost the drain
    thread ~200 ns a record under pgbench -S, and its writer ~110 ns more (dbplugins/postgresql/README.md)."""

    def __init__(self, directory: Path, node: str, limit_bytes: int):
        self.directory, self.node, self.limit_bytes = directory, node, limit_bytes
        self.slot: np.dtype | None = None
        self._file: IO | None = None
        self._path: Path | None = None
        self._n = 0   # files begun
        self._prefix = f".statement-{node}-{os.getpid()}"
        self.meta = directory / f"{self._prefix}.json"
        self.texts = directory / f"{self._prefix}.texts"
        self.described = False

    def write(self, ring: MappedRing) -> int:
        """Everything in the ring now, appended to the current file; returns the records taken."""
        if self._file is None:
            self.slot = ring.slot
            self._path = self.directory / f"{self._prefix}-{self._n}.spool"
            self._file = privfile.create(self._path)   # written by the ring's fd, never through the buffer
            self._n += 1
        total = 0
        while True:
            n = ring.spool(self._file.fileno(), DRAIN_BATCH)
            total += n
            if n < DRAIN_BATCH:
                return total

    @property
    def full(self) -> bool:
        return self._file is not None and os.fstat(self._file.fileno()).st_size >= self.limit_bytes

    def close(self) -> Path | None:
        """The current file, finished (None: nothing spooled since the last one)."""
        if self._file is None:
            return None
        self._file.close()
        self._file, path = None, self._path
        return path

    def last(self, count: int) -> np.ndarray | None:
        """The last `count` records of the current file (None: none); asked from another thread."""
        path = self._path
        try:
            n = os.stat(path).st_size // self.slot.itemsize if path is not None else 0
            return np.fromfile(path, self.slot, min(count, n), offset=max(n - count, 0) * self.slot.itemsize) if n else None
        except FileNotFoundError:   # converted meanwhile
            return None

    def describe(self, names: dict, since_ns: int | None, texts: dict[int, str]) -> None:
        """What converting the files needs, for recover_spooled() after a process that could not stop
        (killed): the slot layout, the node, since_ns, the names known (rewritten), the new texts
        (appended to a file of their own)."""
        if self.slot is None:
            return
        self.described = True
        if texts:
            with privfile.append(self.texts) as f:
                f.writelines(json.dumps([q, t]) + "\n" for q, t in texts.items())
        privfile.write(self.meta, json.dumps({"node": self.node, "since_ns": since_ns,
                                              "slot": np.lib.format.dtype_to_descr(self.slot),
                                              "names": {kind: {str(k): v for k, v in d.items()}
                                                        for kind, d in names.items()}}))


def convert_spooled(conv: RecordConverter, path: Path, slot: np.dtype) -> int:
    """A finished spool file's records as parts of `statement` (a million rows a part; a record cut
    short by a kill is left out), then the file is removed; returns the rows written."""
    n = path.stat().st_size // slot.itemsize
    written, tables, texts = 0, [], []
    with open(path, "rb") as f:
        for first in range(0, n, DRAIN_BATCH):
            table, new = conv.convert(np.fromfile(f, slot, min(DRAIN_BATCH, n - first)))
            tables.append(table)
            texts += new
            if first + DRAIN_BATCH >= n or sum(t.num_rows for t in tables) >= SPOOL_PART_ROWS:
                written += conv.write(tables, texts)
                tables, texts = [], []
    path.unlink()
    return written


def recover_spooled(capture: Capture, progress=None) -> int:
    """Converts what a capture killed before it could stop left spooled in its directory (raw records,
    their description, the texts as they came); returns the records converted. Files of a capture
    still running (its process alive) are left alone."""
    total = 0
    for meta in sorted(capture.path.glob(".statement-*.json")):
        prefix = meta.name[:-len(".json")]
        try:
            pid = int(prefix.rsplit("-", 1)[1])
            os.kill(pid, 0)
            continue   # still capturing
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        try:
            m = json.loads(meta.read_text())
            slot = np.lib.format.descr_to_dtype(m["slot"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MwinvError(f"{meta}: not a statement spool description ({exc})") from None
        names = {kind: {int(k): v for k, v in d.items()} for kind, d in m["names"].items()}
        texts_file = capture.path / f"{prefix}.texts"
        texts = dict(json.loads(line) for line in texts_file.read_text().splitlines()) if texts_file.exists() else {}
        conv = RecordConverter(capture, m["node"], lambda ids: {q: texts[q] for q in ids if q in texts},
                               lambda kind, oids: {o: names.get(kind, {}).get(o) for o in oids}, m["since_ns"])
        files = sorted(capture.path.glob(f"{prefix}-*.spool"), key=lambda f: int(f.stem.rsplit("-", 1)[1]))
        for path in files:
            if progress:
                progress(f"converting {path.name}, left by a capture that did not stop")
            total += convert_spooled(conv, path, slot)
        texts_file.unlink(missing_ok=True)
        meta.unlink()
    return total


class StatementDrainer:
    """Drains the ring every `interval_s` in a thread while a capture runs (at once again while a
    drain finds the ring a quarter full or more); a second thread writes a part at most every `flush_s`
    (fewer, larger Parquet parts) and everything at stop(): a drain never waits for a write (writing
    ~450,000 records with zstd held the one thread long enough for pgbench -S to fill the ring, and
    12 % of the records were dropped). A server that stops or restarts is no error: what was drained
    is kept, and the drainer connects again when the server is back (`disconnects`)."""

    def __init__(self, conninfo: str, capture: Capture, node: str | None = None, interval_s: float = 0.5,
                 flush_s: float = 5.0, since_ns: int | None = None, spool_mb: int = SPOOL_MB):
        self.conninfo = conninfo
        self.spool_mb = spool_mb
        self._spool: Spool | None = None
        self.since_ns = since_ns
        self.began_full = False   # the ring was full when this drainer began: since_ns moved to then
        self._last: pa.Table | None = None   # the last drain that took records
        self.capture = capture
        self.node = node
        self.interval_s = interval_s
        self.flush_s = flush_s
        self.rows_written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer: threading.Thread | None = None
        self._fetched: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._conn: psycopg.Connection | None = None
        self._reader: _Reader | None = None
        self.disconnects = 0
        self.dropped: int | None = 0   # records the ring dropped while this drainer ran (None: unknown)
        self._dropped_at_start = 0
        self.sql_only = ""   # why records come through SQL and not from the mapped ring ("": mapped)

    def start(self) -> "StatementDrainer":
        # this process's Arrow buffers from the system allocator from now on: with mimalloc's (pyarrow's
        # default) each drain faulted in and zeroed fresh 2 MB huge pages, and the drain thread took
        # 0.46 s of CPU per 10 s of pgbench -S, 0.29 s without
        pa.set_memory_pool(pa.system_memory_pool())
        self._conn = connect_untracked(self.conninfo)
        if not extension_available(self._conn):
            self._conn.close()
            raise MwinvError("mwinv is not in shared_preload_libraries of the server or not installed")
        self._reader = _Reader(self._conn, self.capture, self.node, self.since_ns)
        self._attach()
        if self._reader.ring is not None and self.spool_mb > 0:
            self._spool = Spool(self.capture.path, self._reader.records.node, self.spool_mb << 20)
            self._reader.remember()
        self._capacity = int(self._conn.execute("SHOW mwinv.buffer_size").fetchone()[0])
        # a ring left full (a bulk load's statements: 75,000 postgres_fdw inserts on one data node) drops
        # every new record until drained: drain it before the capture's first statement, not 0.5 s later
        ring = self._reader.ring
        if ring is not None and ring.pending >= ring.nslots:
            # full since before the capture (pgbench -S fills 65,536 slots in 0.7 s), so dropping: what it
            # dropped may have ended after since_ns. Free it (its records ended before now), read the
            # counter, and begin the statements after that: a record dropped from then on is counted.
            # (Counter first, then the drain: ~1,000 records dropped between the two, uncounted.)
            self._reader.records.before += len(ring.take(ring.nslots))
            self._dropped_at_start = ring.dropped
            self.since_ns = self._reader.records.since_ns = max(self.since_ns or 0, time.monotonic_ns())
            self.began_full = True
        else:
            self._dropped_at_start = self._dropped()
        self._fetched.put(self._reader.fetch())
        self._thread = threading.Thread(target=self._run, name="mwinv-statement-drainer", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="mwinv-statement-writer", daemon=True)
        self._thread.start()
        self._writer.start()
        return self

    def _run(self) -> None:
        wait, last = self._longest_wait(), time.monotonic()
        remembered = last
        try:
            while not self._stop.wait(wait):
                if self._conn is None and not self._reconnect():
                    continue
                began = time.monotonic()
                if self._spool is not None and self._reader.ring is not None:
                    taken = self._spool.write(self._reader.ring)
                    if self._spool.full:
                        self._hand_over()
                    if began - remembered >= REMEMBER_S or not self._spool.described:
                        try:
                            new = self._reader.remember()
                            if new is not None or not self._spool.described:   # (at first, every text known)
                                self._spool.describe(self._reader.known_names, self.since_ns,
                                                     (new or {}) if self._spool.described else self._reader.known_texts)
                        except psycopg.OperationalError:
                            self._lost_connection()
                            continue
                        remembered = began
                else:
                    try:
                        r, t = self._reader.fetch()
                    except psycopg.OperationalError:   # the server stopped (or was restarted)
                        self._lost_connection()
                        continue
                    self._fetched.put((r, t))
                    if r.num_rows:
                        self._last = r
                    taken = r.num_rows
                if self._reader.ring is not None and not self._reader.ring.server_alive():
                    self._lost_connection()
                    continue
                # the next drain when the ring will be a quarter full at the rate records just came: a
                # fixed 0.5 s plus the drain's own time let pgbench -S (85,000 records/s) overflow the
                # 65,536 slots now and then (11 % dropped). A mapped ring is looked at every 0.1 s at least
                # (a look at an empty one costs no backend anything): from idle to 120,000 records/s, a
                # 0.5 s wait computed at the idle rate filled the ring (2,000 of 5 million dropped)
                rate = taken / max(began - last, 1e-3)
                took = time.monotonic() - began
                wait = max(0.0, min(self._longest_wait(), self._capacity / 4 / max(rate, 1.0) - took))
                last = began
        except BaseException as exc:  # reported by stop()
            self._error = exc

    def _longest_wait(self) -> float:
        return self.interval_s if self._reader.ring is None else min(self.interval_s, MAPPED_WAIT_S)

    def _write_loop(self) -> None:
        """Parts of what the drain thread fetched, every flush_s and at the end (None); spooled files
        converted as they come (full, or the last one at stop)."""
        records: list[pa.Table] = []
        texts: list[dict] = []
        last_flush, done = time.monotonic(), False
        while not done:
            try:
                item = self._fetched.get(timeout=self.flush_s)
            except queue.Empty:
                item = ()
            try:
                if item is None:
                    done = True
                elif isinstance(item, Path):
                    self.rows_written += convert_spooled(self._reader.records, item, self._spool.slot)
                elif item:
                    records.append(item[0])
                    texts += item[1]
                if done or time.monotonic() - last_flush >= self.flush_s:
                    self.rows_written += self._reader.records.write(records, texts)
                    records, texts, last_flush = [], [], time.monotonic()
            except BaseException as exc:  # reported by stop(); what follows is still written
                self._error = self._error or exc
                records, texts = [], []

    def stop(self) -> int:
        """Stop the thread, drain one last time; returns all rows written by this drainer."""
        if self._thread is None:
            return self.rows_written
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            if self._error is None and self._conn is not None:
                if self._spool is not None and self._reader.ring is not None:
                    self._spool.write(self._reader.ring)
                else:
                    self._fetched.put(self._reader.fetch())
                end = self._dropped()
                # a restart resets the counter: then what it dropped is unknown, not negative
                self.dropped = end - self._dropped_at_start if end >= self._dropped_at_start else None
                self._detach()
        except psycopg.OperationalError:   # the server went away meanwhile: what was drained is written
            self._lost_connection()
        finally:
            self._hand_over()
            self._fetched.put(None)
            self._writer.join()
            if self._spool is not None and self._error is None:   # every file converted
                self._spool.meta.unlink(missing_ok=True)
                self._spool.texts.unlink(missing_ok=True)
            if self._conn is not None:
                self._conn.close()
        if self._error is not None:
            raise MwinvError(f"mwinv statement drainer failed: {self._error}") from self._error
        return self.rows_written

    @property
    def spooling(self) -> bool:
        return self._spool is not None

    def _dropped(self) -> int:
        return int(self._conn.execute("SELECT dropped FROM mwinv_info()").fetchone()[0])

    @property
    def median_wall_ns(self) -> int | None:
        """The median duration of the statements the last drain took (None: none yet); computed when an
        event budget asks, once a window, not on every drain."""
        if self._spool is not None:
            recs = self._spool.last(MEDIAN_OF)
            return None if recs is None else int(np.median(recs["end_ns"] - recs["start_ns"]))
        r = self._last
        if r is None:
            return None
        return int(np.median(numpy_ints(r.column("end_ns")) - numpy_ints(r.column("start_ns"))))

    @property
    def before_capture(self) -> int:
        """Records left out: their statements ended before since_ns."""
        return self._reader.records.before if self._reader else 0

    def _attach(self) -> None:
        self._reader.ring, self.sql_only = attach_ring(self._conn, self._reader.dtype)

    def _detach(self) -> None:
        if self._reader.ring is not None:
            self._conn.execute("SELECT mwinv_ring_detach(%s)", [os.getpid()])
            self._reader.ring.close()
            self._reader.ring = None

    def _hand_over(self) -> None:
        """The spool's current file to the writer thread, to be converted."""
        path = self._spool.close() if self._spool is not None else None
        if path is not None:
            self._fetched.put(path)

    def _lost_connection(self) -> None:
        self.disconnects += 1
        self._hand_over()   # what the stopped server recorded is converted now
        if self._reader.ring is not None:   # a restarted server maps a new ring
            self._reader.ring.close()
            self._reader.ring = None
        try:
            self._conn.close()
        except psycopg.Error:
            pass
        self._conn = None

    def _reconnect(self) -> bool:
        """Connect again to a server that was stopped or restarted (the texts already known are kept)."""
        try:
            self._conn = connect_untracked(self.conninfo)
            self._reader.conn = self._conn
            self._attach()
        except psycopg.OperationalError:
            self._conn = None
            return False
        return True

    def __enter__(self) -> "StatementDrainer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
