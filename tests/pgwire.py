"""A minimal PostgreSQL frontend (protocol 3.0, trust authentication, Unix socket) for the one path
libpq and psycopg cannot drive: a portal run in several Execute messages with a row limit, as JDBC
does with fetch_size."""

from __future__ import annotations

import socket
import struct


class WireError(Exception):
    pass


class Wire:
    def __init__(self, socket_dir, port: int, user: str = "postgres", database: str = "postgres"):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(f"{socket_dir}/.s.PGSQL.{port}")
        self.buf = b""
        params = f"user\0{user}\0database\0{database}\0\0".encode()
        self.sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        self.read_until(b"Z")

    def close(self) -> None:
        self.sock.sendall(b"X" + struct.pack("!i", 4))
        self.sock.close()

    def _send(self, kind: bytes, body: bytes = b"") -> None:
        self.sock.sendall(kind + struct.pack("!i", 4 + len(body)) + body)

    def _message(self) -> tuple[bytes, bytes]:
        while len(self.buf) < 5 or len(self.buf) < 1 + struct.unpack("!i", self.buf[1:5])[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WireError("server closed the connection")
            self.buf += chunk
        n = struct.unpack("!i", self.buf[1:5])[0]
        kind, body, self.buf = self.buf[:1], self.buf[5:1 + n], self.buf[1 + n:]
        if kind == b"E":
            raise WireError(body.decode(errors="replace"))
        return kind, body

    def read_until(self, *kinds: bytes) -> tuple[bytes, int]:
        """Messages up to one of `kinds`: (that kind, data rows seen)."""
        rows = 0
        while True:
            kind, _ = self._message()
            rows += kind == b"D"
            if kind in kinds:
                return kind, rows

    def query(self, sql: str) -> int:
        """Simple protocol: data rows returned."""
        self._send(b"Q", sql.encode() + b"\0")
        return self.read_until(b"Z")[1]

    def open_portal(self, sql: str) -> None:
        """Parse and Bind the unnamed statement into the unnamed portal."""
        self._send(b"P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))
        self._send(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))

    def execute(self, max_rows: int) -> tuple[int, bool]:
        """One Execute of the unnamed portal: (rows, portal finished)."""
        self._send(b"E", b"\0" + struct.pack("!i", max_rows))
        self._send(b"H")
        kind, rows = self.read_until(b"s", b"C")
        return rows, kind == b"C"

    def sync(self) -> None:
        self._send(b"S")
        self.read_until(b"Z")
