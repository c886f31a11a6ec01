"""Remote storage's requests followed through the TCP connections the kernel reports: which processes
on the storage nodes served which data node's FUSE client, and what they did for it.

With each reading of the storage counters (Storage.counters: before and after each query of a
one-stream pass) goes a snapshot of the processes on both ends: per data node its FUSE client's (sshfs
with its ssh, the glusterfs client), per storage node every process of its cgroup (sshd with the shell
and sftp-server under its session, glusterd, the bricks' glusterfsd); each with its parent, its on-CPU
time (schedstat), the bytes it had read from the disk (/proc/<pid>/io read_bytes) and its TCP
connections as the kernel reports them (sock_diag in the node's namespace, each socket's inode from
/proc/<pid>/fd). A client's connection (local, peer) is served by the process holding (peer, local);
that process and its descendants serve that data node. sock_diag's snapshot suffices: the clients keep
their connections for the mount's life (the sock:inet_sock_set_state tracepoint exists here, but a
recorder would only add the connections' open and close, which no window of a query holds).

    work(before, after)   per data node: its client's CPU, per linked storage node its servers' CPU and reads
"""

from __future__ import annotations

from pathlib import Path

from mwinv.kernel_trace.tcp import socket_inodes, sockets


def pid_cpu_ns(pid: int) -> int:
    """pid's on-CPU ns summed over its threads' schedstat: /proc/<pid>/stat counts 10 ms ticks, fewer than
    a FUSE client serving a small scan may use (a delta of 0: the client's block went missing from a CI
    run at SF 0.01)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):   # a thread that ended meanwhile
            continue
    return total


def _process(pid: int) -> dict | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        io = dict(ln.split(": ", 1) for ln in Path(f"/proc/{pid}/io").read_text().splitlines())
        return {"pid": pid, "ppid": int(stat.rsplit(")", 1)[1].split()[1]),
                "comm": stat[stat.index("(") + 1:stat.rindex(")")], "cpu_ns": pid_cpu_ns(pid),
                "read_bytes": int(io.get("read_bytes", 0)), "inodes": socket_inodes(pid)}
    except (OSError, ValueError, IndexError):   # gone meanwhile
        return None


def processes(pids: list[int], comms: set[str] | None = None) -> list[dict]:
    """pids (of one network namespace) with their parents, CPU, disk reads and TCP connections
    ([local, peer]); with comms only those whose name is one of them."""
    procs = [p for p in map(_process, pids) if p and (comms is None or p["comm"] in comms)]
    socks = {}
    for p in procs:   # the namespace's sockets, through the first process still there
        try:
            socks = sockets(p["pid"])
            break
        except OSError:
            continue
    for p in procs:
        inodes = p.pop("inodes")
        p["tcp"] = sorted([s.local, s.peer] for i, s in socks.items() if i in inodes and not s.listening)
    return procs


def links(reading: dict) -> dict[str, dict[str, dict[str, int]]]:
    """Per data node, per storage node: its client's connections ("local -> peer") and the pid serving each."""
    holder = {(local, peer): (s, p["pid"]) for s, procs in reading["storage_nodes"].items() for p in procs
              for local, peer in p["tcp"]}
    out: dict = {}
    for d, procs in reading["data_nodes"].items():
        for p in procs:
            for local, peer in p["tcp"]:
                if (peer, local) in holder:
                    s, pid = holder[(peer, local)]
                    out.setdefault(d, {}).setdefault(s, {})[f"{local} -> {peer}"] = pid
    return out


def _descendants(procs: list[dict], roots: set[int]) -> set[int]:
    out, grew = set(roots), True
    while grew:
        more = {p["pid"] for p in procs if p["ppid"] in out} - out
        out |= more
        grew = bool(more)
    return out


def _delta(before: list[dict], after: list[dict], pids: set[int] | None = None) -> dict:
    """cpu_ns and read_bytes of `after`'s processes (those in pids) since `before` (0 for one started since)."""
    old = {(p["pid"], p["comm"]): p for p in before}
    out = {"cpu_ns": 0, "read_bytes": 0}
    for p in after:
        if pids is None or p["pid"] in pids:
            o = old.get((p["pid"], p["comm"]), {})
            for k in out:
                out[k] += max(0, p[k] - o.get(k, 0))
    return out


def work(before: dict, after: dict) -> dict:
    """Per data node with a linked connection, between two snapshots: its FUSE client's CPU
    (client_cpu_ns) and per storage node serving it the CPU and disk reads of the processes holding its
    connections and of their descendants (sftp-server under sshd's session), with those connections."""
    out = {}
    for d, by_node in links(after).items():
        servers = {}
        for s, conns in by_node.items():
            procs = after["storage_nodes"][s]
            pids = _descendants(procs, set(conns.values()))
            servers[s] = {**_delta(before["storage_nodes"].get(s, []), procs, pids), "connections": conns,
                          "serving": sorted(f"{p['comm']} {p['pid']}" for p in procs if p["pid"] in pids)}
        out[d] = {"client_cpu_ns": _delta(before["data_nodes"].get(d, []), after["data_nodes"][d])["cpu_ns"],
                  "storage_nodes": servers}
    return out
