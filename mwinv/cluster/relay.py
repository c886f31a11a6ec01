"""Link latency in user space (netem is not in every kernel): a TCP relay on the host that forwards a
node's connections and holds every chunk `delay_ms` before passing it on, each way, so a round trip
through it takes 2 x delay_ms more. The coordinator's postgres_fdw server of a node points at its
relay. One thread per direction per connection reads, another sends when each chunk is due: the
delay is added once per chunk, not per read, and a slow reader does not stretch it."""

from __future__ import annotations

import heapq
import socket
import threading
import time

CHUNK = 1 << 16


class LatencyRelay:
    def __init__(self, listen_host: str, target: tuple[str, int], delay_ms: float):
        self.target, self.delay_s = target, delay_ms / 1000
        self.server = socket.create_server((listen_host, 0))
        self.address = self.server.getsockname()   # (host, port) the coordinator connects to
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = [self.server]
        self._thread = threading.Thread(target=self._accept, name="mwinv-relay", daemon=True)

    def start(self) -> "LatencyRelay":
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                _Pipe(a, b, self.delay_s).start()

    def stop(self) -> None:
        self._stop.set()
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class _Pipe:
    """src -> dst, each chunk sent delay_s after it was read."""

    def __init__(self, src: socket.socket, dst: socket.socket, delay_s: float):
        self.src, self.dst, self.delay_s = src, dst, delay_s
        self.due: list[tuple[float, int, bytes]] = []   # (due time, sequence, chunk): a heap in arrival order
        self.cond = threading.Condition()
        self.closed = False

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._send, daemon=True).start()

    def _read(self) -> None:
        seq = 0
        while True:
            try:
                data = self.src.recv(CHUNK)
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.closed = True
                else:
                    heapq.heappush(self.due, (time.monotonic() + self.delay_s, seq, data))
                    seq += 1
                self.cond.notify()
            if not data:
                return

    def _send(self) -> None:
        while True:
            with self.cond:
                while not self.due and not self.closed:
                    self.cond.wait()
                if not self.due and self.closed:
                    break
                due, _, data = self.due[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                heapq.heappop(self.due)
            try:
                self.dst.sendall(data)
            except OSError:
                break
        try:
            self.dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
