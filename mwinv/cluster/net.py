"""A cluster's network on one host: one network namespace per node, each joined by a veth pair to a
bridge in the host's namespace (the host is on the bridge too, so it reaches every node), links
shaped with tbf in both directions (netem is not in every kernel: latency is not emulated here).

Every interface and namespace carries the cluster's tag, so `clean` finds what a killed run left."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from dataclasses import dataclass, field

from mwinv.errors import MwinvError

NETNS_PREFIX = "mwinv-cl-"
LINK_PREFIX = "mwc"    # bridge mwc<tag>b, node links mwc<tag><i>h (host end) / mwc<tag><i>n (node end)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise MwinvError(f"ip {' '.join(args)}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
    return proc


def tc(*args: str) -> None:
    proc = subprocess.run(["tc", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise MwinvError(f"tc {' '.join(args)}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.231.0.0/16 that no interface of this host uses."""
    used = ip("-4", "-o", "addr").stdout
    taken = {ipaddress.ip_interface(m).network for m in re.findall(r"inet (\S+)", used)}
    for k in range(256):
        net = ipaddress.ip_network(f"10.231.{k}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise MwinvError("no free /24 in 10.231.0.0/16 for the cluster's bridge")


@dataclass
class NodeLink:
    node: str
    netns: str
    host_if: str
    node_if: str
    address: str


@dataclass
class ClusterNet:
    tag: str
    subnet: str = ""
    bridge: str = ""
    links: dict[str, NodeLink] = field(default_factory=dict)

    @property
    def host_address(self) -> str:
        return str(ipaddress.ip_network(self.subnet)[1])

    def create_bridge(self) -> None:
        self.subnet = self.subnet or str(free_subnet())
        self.bridge = f"{LINK_PREFIX}{self.tag}b"
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.host_address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_node(self, node: str, index: int, on_created=None) -> NodeLink:
        """A namespace for `node` with address .(10+index) on the bridge. on_created(link) is called as
        soon as the namespace exists (so that a crash afterwards still finds it)."""
        net = ipaddress.ip_network(self.subnet)
        link = NodeLink(node, f"{NETNS_PREFIX}{self.tag}-{node}", f"{LINK_PREFIX}{self.tag}{index}h",
                        f"{LINK_PREFIX}{self.tag}{index}n", str(net[10 + index]))
        ip("netns", "add", link.netns)
        self.links[node] = link
        if on_created:
            on_created(link)
        ip("link", "add", link.host_if, "type", "veth", "peer", "name", link.node_if)
        ip("link", "set", link.node_if, "netns", link.netns)
        ip("link", "set", link.host_if, "master", self.bridge)
        ip("link", "set", link.host_if, "up")
        ip("-n", link.netns, "addr", "add", f"{link.address}/24", "dev", link.node_if)
        ip("-n", link.netns, "link", "set", link.node_if, "up")
        ip("-n", link.netns, "link", "set", "lo", "up")
        return link

    def shape(self, node: str, mbit: float) -> None:
        """Cap the node's link at `mbit` each way: tbf on the host end (traffic to the node) and on the
        node end (traffic from it). Burst: 1/100 s of the rate, at least 32 KiB (tbf needs a burst of
        at least one timer tick's worth of bytes, or it cannot reach its rate)."""
        link = self.links[node]
        burst = max(32 * 1024, int(mbit * 1e6 / 8 / 100))
        args = ["root", "tbf", "rate", f"{mbit}mbit", "burst", str(burst), "latency", "50ms"]
        tc("qdisc", "replace", "dev", link.host_if, *args)
        tc("-n", link.netns, "qdisc", "replace", "dev", link.node_if, *args)

    def unshape(self, node: str) -> None:
        """Lift the node's link cap (back to the veth's default queue)."""
        link = self.links[node]
        for prefix, dev in (((), link.host_if), (("-n", link.netns), link.node_if)):
            if "tbf" in subprocess.run(["tc", *prefix, "qdisc", "show", "dev", dev], capture_output=True,
                                       text=True).stdout:
                tc(*prefix, "qdisc", "del", "dev", dev, "root")

    def remove(self) -> None:
        """Delete the links, the bridge and the namespaces (a veth goes with either of its ends)."""
        for link in self.links.values():
            ip("link", "del", link.host_if, check=False)
            ip("netns", "del", link.netns, check=False)
        if self.bridge:
            ip("link", "del", self.bridge, check=False)


def leftovers(tags: set[str] | None = None) -> tuple[list[str], list[str]]:
    """Namespaces and links of clusters (all, or those whose tag is in `tags`): (netns, links)."""
    spaces = [line.split()[0] for line in ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    ours = [n for n in spaces if n.startswith(NETNS_PREFIX)]
    links = re.findall(rf"^\d+: ({LINK_PREFIX}[0-9a-f]{{6}}(?:b|\d+h))[@:]", ip("-o", "link", check=False).stdout, re.M)
    if tags is not None:
        ours = [n for n in ours if n[len(NETNS_PREFIX):].split("-")[0] in tags]
        links = [name for name in links if name[len(LINK_PREFIX):len(LINK_PREFIX) + 6] in tags]
    return ours, links
