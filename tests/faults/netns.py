"""Worker "hosts" in network namespaces, and the faults their network suffers.

Each host is a namespace joined to this one by a veth pair on a /30 of its own in
198.18.0.0/15 (set aside for network tests, RFC 2544); PostgreSQL and RabbitMQ listen on
loopback only, so forwarders on the host side's address (``gateway``) lead to them.

Faults are made inside the host's namespace, on its packets, as a network makes them:

- ``partition``: iptables drops what the host sends to the gateway and what comes back,
  so its connections hang, unanswered, rather than fail; ``heal`` lets them through again
  and TCP's retransmissions carry on where they stopped.
- ``degrade``: iptables' ``statistic`` match drops a share of the packets both ways, and
  ``tbf`` caps the rate both ways, so bursts queue. This kernel has no ``netem`` (and no
  other qdisc that delays by a fixed time), so the delay is the queueing a slow link
  builds, plus the retransmission timeouts of the lost packets.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess

PREFIX = "txqmh"  # namespaces "txqmh-<pid>-<n>", veths "tqm<pid>h<n>" (15 characters at most)
_NETWORK = ipaddress.IPv4Address("198.18.0.0")


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, a container without the right), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    try:
        _run("ip", "netns", "add", probe)
    except RuntimeError as exc:
        return f"cannot make a network namespace ({exc})"
    _run("ip", "netns", "del", probe)
    return None


def remove_stale() -> None:
    """Remove the namespaces and veths a run that died left behind (their pid is gone)."""
    for line in _run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == PREFIX and parts[1].isdigit():
            pid = int(parts[1])
            if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                Host(int(parts[2]) if parts[2].isdigit() else 0, pid).destroy(name)


class Host:
    """A namespace with a veth pair to this one: ``address`` inside, ``gateway`` outside."""

    def __init__(self, index: int, pid: int | None = None) -> None:
        pid = os.getpid() if pid is None else pid
        self.ns = f"{PREFIX}-{pid}-{index}"
        self.outer, self.inner = f"tqm{pid}h{index}", f"tqm{pid}n{index}"
        # A /30 per (pid, host): concurrent runs on one machine do not meet.
        base = _NETWORK + 4 * ((pid % 10_000) * 3 + index)
        self.gateway, self.address = str(base + 1), str(base + 2)

    def create(self) -> None:
        inside = ("ip", "netns", "exec", self.ns, "ip")
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        _run("ip", "link", "set", self.inner, "netns", self.ns)
        _run("ip", "addr", "add", f"{self.gateway}/30", "dev", self.outer)
        _run("ip", "link", "set", self.outer, "up")
        _run(*inside, "addr", "add", f"{self.address}/30", "dev", self.inner)
        _run(*inside, "link", "set", self.inner, "up")
        _run(*inside, "link", "set", "lo", "up")

    def destroy(self, ns: str | None = None) -> None:
        """Remove the veth (at once; the namespace's own removal frees it only later) and
        the namespace, with its firewall rules and qdiscs. Idempotent."""
        for cmd in (("ip", "link", "del", self.outer), ("ip", "netns", "del", ns or self.ns)):
            subprocess.run(cmd, capture_output=True, timeout=30, check=False)

    def exec(self) -> tuple[str, ...]:
        """The prefix that runs a command on this host (``ip netns exec`` execs it: the
        process keeps the pid it was started with)."""
        return ("ip", "netns", "exec", self.ns)

    def _iptables(self, chain: str, *rule: str) -> None:
        _run(*self.exec(), "iptables", "-w", "-A", chain, *rule, "-j", "DROP")

    def partition(self, port: int | None = None) -> None:
        """Drop every packet between this host and the gateway (``port``: only those to and
        from that TCP port of the gateway)."""
        inbound: tuple[str, ...] = () if port is None else ("-p", "tcp", "--sport", str(port))
        outbound: tuple[str, ...] = () if port is None else ("-p", "tcp", "--dport", str(port))
        self._iptables("INPUT", "-s", self.gateway, *inbound)
        self._iptables("OUTPUT", "-d", self.gateway, *outbound)

    def lose_replies(self, port: int) -> None:
        """Drop what the gateway's TCP ``port`` sends this host, and nothing the host sends:
        its statements arrive and commit, and it never hears so."""
        self._iptables("INPUT", "-s", self.gateway, "-p", "tcp", "--sport", str(port))

    def degrade(self, loss: float, rate: str) -> None:
        """Lose ``loss`` of the packets each way at random, and cap each way at ``rate``."""
        for chain in ("INPUT", "OUTPUT"):
            self._iptables(chain, "-m", "statistic", "--mode", "random", "--probability", str(loss))
        # A small bucket, so that queueing starts at once; up to 500 ms of it, then drops.
        tbf = ("root", "tbf", "rate", rate, "burst", "4kb", "latency", "500ms")
        _run(*self.exec(), "tc", "qdisc", "add", "dev", self.inner, *tbf)
        _run("tc", "qdisc", "add", "dev", self.outer, *tbf)

    def heal(self) -> None:
        """Undo ``partition`` and ``degrade``: the namespace's rules are all the tests'."""
        _run(*self.exec(), "iptables", "-w", "-F")
        for prefix, dev in ((self.exec(), self.inner), ((), self.outer)):
            if "tbf" in _run(*prefix, "tc", "qdisc", "show", "dev", dev):
                _run(*prefix, "tc", "qdisc", "del", "dev", dev, "root")
