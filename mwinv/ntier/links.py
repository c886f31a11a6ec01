"""Which backend served which client: the TCP connections the kernel reports on both of pgpool's hops.
A pgpool child holds the connection a client opened to pgpool (accepted on pgpool's port) and its own
connections to the backends; a backend holds the other end of the latter (accepted on the server's
port). The socket 4-tuples join the three: client port -> pgpool child -> (node, backend pid), and a
backend pid's statements are then that client's (docs/ntier.md). The pgpool child's descriptors of
both kept too: its kernel trace's reads and writes name them (mwinv/ntier/balancer.py)."""

from __future__ import annotations

from mwinv.kernel_trace.recorder import descendants
from mwinv.kernel_trace.tcp import socket_fds, sockets


def _held(pids: list[int], socks: dict) -> list[tuple[int, int, object]]:
    """(pid, fd, socket) of each connected TCP socket the pids hold."""
    return [(pid, fd, socks[i]) for pid in pids for fd, i in socket_fds(pid).items()
            if i in socks and not socks[i].listening]


def snapshot(pool_pid: int, pool_port: int, servers: dict[str, tuple[int, int]]) -> list[dict]:
    """One look at the connections now: a row per pgpool-to-backend connection, with the client whose
    session the pgpool child serves (None: a child between sessions keeps its backend connections, its
    connection cache). servers: node -> (postmaster pid, port)."""
    socks = {}   # each node's namespace's (the inodes are the host's, unique across namespaces)
    for pid in {pool_pid, *(postmaster for postmaster, _ in servers.values())}:
        socks.update(sockets(net_pid=pid))
    backend_of = {}   # pgpool's end "addr:port" -> (node, backend pid)
    for node, (postmaster, port) in servers.items():
        for pid, _, s in _held(descendants(postmaster), socks):
            if s.local_port == port:
                backend_of[s.peer] = (node, pid)
    held = _held(descendants(pool_pid), socks)
    client_of = {pid: (s.peer, fd) for pid, fd, s in held if s.local_port == pool_port}
    rows = []
    for pid, fd, s in held:
        if s.local_port != pool_port and s.local in backend_of:
            client, client_fd = client_of.get(pid, (None, None))
            node, backend = backend_of[s.local]
            rows.append({"client": client, "client_fd": client_fd, "pgpool_pid": pid, "pgpool_fd": fd,
                         "pgpool_local": s.local, "node": node, "backend_pid": backend})
    return rows
