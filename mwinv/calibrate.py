"""Platform calibration: the variable factors of [Taufer]'s model (Table 1), measured on this machine.

- disk: sequential rate (O_DIRECT reads of the device's readahead size, so the page cache is out of
  the way), random access time (the median off-CPU part of an O_DIRECT read of one PostgreSQL page at
  a random offset, minus its transfer time at the sequential rate) and the same for short sequential
  reads (pages a short hop apart, as an index range reads them);
- CPU: a speed factor from a fixed compute loop (SHA-256 over a buffer; C code, so the figure does
  not depend on the Python version) relative to REFERENCE_CPU_BPS;
- network, per link: TCP throughput (one bulk transfer) and latency (half the round trip of 1-byte
  ping-pongs) to a small echo server on the link's address (inside a network namespace if given).

The result is a plain dict stored in the capture manifest under "calibration"."""

from __future__ import annotations

import hashlib
import mmap
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from mwinv.capture.tables import Capture
from mwinv.cgroup import block_device_of
from mwinv.correlator.attribution import SEQ_GAP_SECTORS
from mwinv.correlator.load import remove_stale
from mwinv.errors import MwinvError

# SHA-256 throughput (bytes/s) of one core of the project's reference VM (AMD EPYC, 2026-11-22);
# cpu_speed_factor = measured / reference, so 2.0 means "twice as fast as the reference".
REFERENCE_CPU_BPS = 1.7e9
PG_PAGE = 8192
READ_BLOCK = 50  # reads per block of one kind
# Blocks are spread over ~1 s: a virtual disk's latency shifts between levels for a second or more.
BLOCK_PAUSE_S = 0.05


def _aligned_buffer(size: int) -> mmap.mmap:
    # O_DIRECT needs page-aligned memory; an anonymous mmap is.
    return mmap.mmap(-1, size)


def _readahead_bytes(path: Path) -> int:
    """The size of the requests a sequential scan sends: readahead, split at the queue's max request."""
    queue = Path(f"/sys/dev/block/{block_device_of(path)}/queue")
    try:
        kb = min(int((queue / "read_ahead_kb").read_text()), int((queue / "max_sectors_kb").read_text()))
        return max(4096, kb * 1024)
    except (OSError, ValueError):
        return 128 * 1024


def _timed_reads(fd: int, buf: mmap.mmap, offsets: list[int]) -> tuple[list[float], list[float]]:
    """Each read's latency and the part of it spent off-CPU (latency - the thread's CPU time).
    The off-CPU part is the disk's: the kernel's work to submit and complete a request runs on the
    reader's CPU, where the attribution counts it as the statement's CPU (t_cpu) already."""
    lat, waits = [], []
    for off in offsets:
        c0, t0 = time.thread_time(), time.perf_counter()
        os.preadv(fd, [buf], off)
        t1, c1 = time.perf_counter(), time.thread_time()
        lat.append(t1 - t0)
        waits.append(max(0.0, (t1 - t0) - (c1 - c0)))
    return lat, waits


def calibrate_disk(directory: str | os.PathLike, file_mb: int = 128, seq_passes: int = 2,
                   random_reads: int = 1000) -> dict:
    """Sequential rate and random access time of the filesystem holding `directory` (O_DIRECT)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MwinvError(f"{directory}: not a directory (calibration needs the data filesystem)")
    path = directory / f".mwinv-calibrate-{uuid.uuid4().hex[:8]}"
    size = file_mb * 2**20
    chunk = 2**20
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
        except OSError as exc:
            raise MwinvError(f"{path}: cannot open with O_DIRECT ({exc.strerror})") from None
        try:
            buf = _aligned_buffer(chunk)
            buf.write(os.urandom(chunk))  # incompressible, in case the storage compresses
            for off in range(0, size, chunk):
                os.pwritev(fd, [buf], off)
            os.fsync(fd)
            req = _readahead_bytes(directory)
            rbuf = _aligned_buffer(req)
            best = 0.0
            for _ in range(seq_passes):  # the best pass: others may share the disk
                t0 = time.perf_counter()
                for off in range(0, size, req):
                    os.preadv(fd, [rbuf], off)
                best = max(best, size / (time.perf_counter() - t0))
            pbuf = _aligned_buffer(PG_PAGE)
            rng = random.Random(1)
            pages = size // PG_PAGE
            # Random reads, and short sequential ones (an index range's pages: each starts at most
            # SEQ_GAP_SECTORS after the last one ended, the correlator's definition of sequential), in
            # alternating blocks spread over time, so that a drift of a shared disk's latency reaches
            # both alike and the medians are the common level, not one moment's.
            lat, waits, seq_waits = [], [], []
            max_hop = SEQ_GAP_SECTORS * 512 // PG_PAGE
            for _ in range(max(1, random_reads // READ_BLOCK)):
                block = _timed_reads(fd, pbuf, [rng.randrange(pages) * PG_PAGE for _ in range(READ_BLOCK)])
                lat += block[0]
                waits += block[1]
                page = rng.randrange(pages // 2)
                hops = []
                for _ in range(READ_BLOCK):
                    page = (page + 1 + rng.randrange(max_hop + 1)) % pages
                    hops.append(page * PG_PAGE)
                seq_waits += _timed_reads(fd, pbuf, hops)[1]
                time.sleep(BLOCK_PAUSE_S)
            for sample in (lat, waits, seq_waits):
                sample.sort()
            return {
                "path": str(directory), "device": block_device_of(directory), "file_bytes": size,
                "seq_request_bytes": req, "disk_rate_bps": best,
                "rand_request_bytes": PG_PAGE,
                # the median: on a shared disk the mean follows other processes' bursts
                "rand_access_s": max(0.0, waits[len(waits) // 2] - PG_PAGE / best),
                "rand_latency_p50_s": lat[len(lat) // 2], "rand_latency_p99_s": lat[int(len(lat) * 0.99)],
                "rand_latency_mean_s": sum(lat) / len(lat),
                "seq_access_s": max(0.0, seq_waits[len(seq_waits) // 2] - PG_PAGE / best),
            }
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)


def calibrate_cpu(buffer_mb: int = 8, rounds: int = 15) -> dict:
    """CPU speed factor: the best of `rounds` short SHA-256 passes (the best one is the least disturbed
    by other load on a shared machine)."""
    data = bytes(range(256)) * (buffer_mb * 2**20 // 256)
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        hashlib.sha256(data).digest()
        best = max(best, len(data) / (time.perf_counter() - t0))
    return {"loop": "sha256", "bytes_per_s": best, "cpu_speed_factor": best / REFERENCE_CPU_BPS,
            "cpus": len(os.sched_getaffinity(0))}  # the CPUs this process (and the server it measures) may use


# ---- network

def _echo_server(sock: socket.socket) -> None:
    """Serve one connection: 8-byte length + bulk data (answered with 1 byte), then echo bytes."""
    conn, _ = sock.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        n = int.from_bytes(_recv_exact(conn, 8), "big")
        left = n
        while left:
            got = conn.recv_into(memoryview(bytearray(min(left, 2**20))))
            if not got:
                return
            left -= got
        conn.sendall(b"k")
        while True:
            b = conn.recv(1)
            if not b:
                return
            conn.sendall(b)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = conn.recv(n - len(out))
        if not got:
            raise ConnectionError("peer closed")
        out += got
    return bytes(out)


def serve(address: str) -> None:
    """Run the echo server for one measurement (used inside a network namespace); prints the port."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        sock.listen(1)
        print(sock.getsockname()[1], flush=True)
        _echo_server(sock)


def _measure(address: str, port: int, bulk_bytes: int, pings: int) -> tuple[float, float]:
    with socket.create_connection((address, port), timeout=30) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = b"\0" * 2**20
        t0 = time.perf_counter()
        conn.sendall(bulk_bytes.to_bytes(8, "big"))
        for _ in range(bulk_bytes // len(payload)):
            conn.sendall(payload)
        _recv_exact(conn, 1)
        rate = bulk_bytes / (time.perf_counter() - t0)
        rtts = []
        for _ in range(pings):
            t0 = time.perf_counter()
            conn.sendall(b"p")
            _recv_exact(conn, 1)
            rtts.append(time.perf_counter() - t0)
    rtts.sort()
    return rate, rtts[len(rtts) // 2] / 2


def parse_link(link: str) -> tuple[str, str]:
    """'ADDRESS' or 'NETNS:ADDRESS' -> (netns or '', address); an IPv6 address has several colons."""
    return (link.split(":", 1)[0], link.split(":", 1)[1]) if link.count(":") == 1 else ("", link)


def check_link(link: str) -> None:
    """Fail early (before minutes of other measurements) on a local address this host does not have."""
    netns, address = parse_link(link)
    if netns:
        if not Path(f"/run/netns/{netns}").exists():
            raise MwinvError(f"link {link}: no network namespace {netns!r} (ip netns list)")
        return
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except (OSError, UnicodeError) as exc:
            raise MwinvError(f"link {link}: cannot bind a TCP socket to {address} "
                             f"({getattr(exc, 'strerror', None) or exc})") from None


def calibrate_link(link: str, bulk_mb: int = 64, pings: int = 500) -> dict:
    """Rate (bytes/s) and one-way latency of a link: 'ADDRESS' or 'NETNS:ADDRESS' (server inside NETNS)."""
    check_link(link)
    netns, address = parse_link(link)
    bulk = bulk_mb * 2**20
    if netns:
        cmd = ["ip", "netns", "exec", netns, sys.executable, "-m", "mwinv.calibrate", "serve",
               address]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        try:
            line = proc.stdout.readline().strip()
            if not line.isdigit():
                raise MwinvError(f"link {link}: echo server in netns {netns} did not start "
                                 f"({proc.stderr.read().strip().splitlines()[-1:] or 'no output'})")
            rate, latency = _measure(address, int(line), bulk, pings)
        finally:
            proc.wait(timeout=30)
    else:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
            sock.listen(1)
            server = threading.Thread(target=_echo_server, args=(sock,), daemon=True)
            server.start()
            rate, latency = _measure(address, sock.getsockname()[1], bulk, pings)
            server.join(timeout=10)
    return {"link": link, "address": address, "netns": netns or None, "rate_bps": rate,
            "latency_s": latency}


def calibrate(data_dir: str | os.PathLike, links: list[str] | None = None, progress=None) -> dict:
    """All factors; links default to loopback (the only link of a one-node capture)."""
    say = progress or (lambda msg: None)
    links = links or ["127.0.0.1"]
    for link in links:
        check_link(link)
    say("disk: sequential and random O_DIRECT reads")
    disk = calibrate_disk(data_dir)
    say("cpu: fixed compute loop")
    cpu = calibrate_cpu()
    result = {"measured_wall_ns": time.time_ns(), "host": socket.gethostname(), "disk": disk, "cpu": cpu,
              "links": {}}
    for link in links:
        say(f"network: {link}")
        result["links"][link] = calibrate_link(link)
    return result


def store(capture_dir: str | os.PathLike, calibration: dict) -> None:
    """Put the calibration into the capture's manifest (creating the manifest if needed)."""
    cap = Capture(capture_dir)
    if not cap.manifest_path.exists():
        cap.create()
    cap.update_manifest(calibration=calibration)
    remove_stale(cap)   # the model's estimates and the advice's gains were computed on the old platform


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2])
