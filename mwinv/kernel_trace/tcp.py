"""The kernel's own account of TCP connections (sock_diag, as `ss -ti` reads it): per socket its
addresses, and from struct tcp_info the round-trip times the kernel measured (the minimum over the
connection's life, handshake included; the smoothed one) and the bytes and segments moved.

    sockets(net_pid)       {inode: TcpSocket} of this network namespace, or net_pid's (connected and listening)
    socket_inodes(pid)     the inodes of pid's sockets (/proc/pid/fd)
    socket_fds(pid)        {fd: inode} of pid's sockets
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct
import threading
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
INET_DIAG_INFO = 2
CLONE_NEWNET = 0x40000000
TCP_ESTABLISHED, TCP_CLOSE_WAIT, TCP_LISTEN = 1, 8, 10

NLMSGHDR = struct.Struct("=IHHII")
REQ = struct.Struct("=BBBxI48s")                  # inet_diag_req_v2 (the socket id left zero: every socket)
MSG = struct.Struct("=BBBB HH 16s16s I8s IIIII")  # inet_diag_msg: ports big-endian, then if, cookie ... inode
RTATTR = struct.Struct("=HH")
# struct tcp_info (linux/tcp.h), the fields read: offsets fixed since 4.x, the struct only grows
TCPI_RTT, TCPI_RTTVAR, TCPI_TOTAL_RETRANS = 68, 72, 100
TCPI_BYTES_ACKED, TCPI_BYTES_RECEIVED, TCPI_SEGS_OUT, TCPI_SEGS_IN, TCPI_MIN_RTT = 120, 128, 136, 140, 148


@dataclass
class TcpSocket:
    local: str               # address:port
    peer: str
    local_port: int
    listening: bool
    srtt_ns: int | None      # the kernel's smoothed round trip
    rttvar_ns: int | None
    min_rtt_ns: int | None   # the least round trip it measured (None: kernel without it)
    bytes_acked: int | None
    bytes_received: int | None
    segs_out: int | None
    segs_in: int | None
    retrans: int | None


def _addr(family: int, raw: bytes, port: int) -> str:
    if family == socket.AF_INET:
        return f"{ipaddress.IPv4Address(raw[:4])}:{port}"
    a = ipaddress.IPv6Address(raw)
    return f"[{a.ipv4_mapped or a}]:{port}"


def _u32(info: bytes, off: int) -> int | None:
    return struct.unpack_from("=I", info, off)[0] if len(info) >= off + 4 else None


def _u64(info: bytes, off: int) -> int | None:
    return struct.unpack_from("=Q", info, off)[0] if len(info) >= off + 8 else None


def _us(v: int | None) -> int | None:
    return None if v is None or v == 0xFFFFFFFF else v * 1000   # ~0: no round trip measured yet


def _dump(family: int) -> list[tuple[int, TcpSocket]]:
    states = (1 << TCP_ESTABLISHED) | (1 << TCP_CLOSE_WAIT) | (1 << TCP_LISTEN)   # close-wait: the client left
    body = REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), states, b"")
    out = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as s:
        s.sendto(NLMSGHDR.pack(NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                 + body, (0, 0))
        while True:
            data = s.recv(1 << 16)
            off = 0
            while off + NLMSGHDR.size <= len(data):
                length, kind, _, _, _ = NLMSGHDR.unpack_from(data, off)
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", data, off + NLMSGHDR.size)[0]
                    raise OSError(errno, f"sock_diag: {os.strerror(errno)}")
                fam, state, _, _, sport, dport, src, dst, _, _, _, _, _, _, inode = MSG.unpack_from(
                    data, off + NLMSGHDR.size)
                info = b""
                a = off + NLMSGHDR.size + MSG.size
                while a + RTATTR.size <= off + length:
                    alen, atype = RTATTR.unpack_from(data, a)
                    if alen < RTATTR.size:
                        break
                    if atype == INET_DIAG_INFO:
                        info = data[a + RTATTR.size:a + alen]
                    a += (alen + 3) & ~3
                lport, rport = socket.ntohs(sport), socket.ntohs(dport)
                out.append((inode, TcpSocket(
                    _addr(fam, src, lport), _addr(fam, dst, rport), lport, state == TCP_LISTEN,
                    _us(_u32(info, TCPI_RTT)), _us(_u32(info, TCPI_RTTVAR)), _us(_u32(info, TCPI_MIN_RTT)),
                    _u64(info, TCPI_BYTES_ACKED), _u64(info, TCPI_BYTES_RECEIVED), _u32(info, TCPI_SEGS_OUT),
                    _u32(info, TCPI_SEGS_IN), _u32(info, TCPI_TOTAL_RETRANS))))
                off += (length + 3) & ~3
            if not data:
                return out


def sockets(net_pid: int | None = None) -> dict[int, TcpSocket]:
    """Every established, closing (the peer left) or listening TCP socket of this network namespace, by
    inode; with net_pid, of that process's namespace (a netlink socket reports its own namespace's: the
    dump runs in a thread that joined net_pid's, which setns moves alone)."""
    if net_pid is None:
        return dict(_dump(socket.AF_INET) + _dump(socket.AF_INET6))
    got: dict = {}

    def dump() -> None:
        try:
            fd = os.open(f"/proc/{net_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into the network namespace of pid {net_pid}: {os.strerror(err)}")
            finally:
                os.close(fd)
            got["socks"] = sockets()
        except OSError as exc:
            got["error"] = exc

    t = threading.Thread(target=dump, name="mwinv-netns-sockets")
    t.start()
    t.join()
    if "error" in got:
        raise got["error"]
    return got["socks"]


def socket_fds(pid: int) -> dict[int, int]:
    """pid's open sockets: {fd: inode} (empty when it is gone or not ours to read)."""
    fds = f"/proc/{pid}/fd"
    out: dict[int, int] = {}
    try:
        names = os.listdir(fds)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"{fds}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(name)] = int(target[8:-1])
    return out


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets pid holds open (empty when it is gone or not ours to read)."""
    return set(socket_fds(pid).values())
