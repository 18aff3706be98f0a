"""A worker host of its own: a network namespace wired to the host through a switch, for tests that
cut a process off the network and let it back on.

    host [pgqw<tag>h 10.231.x.1/29] ─veth─ [port-host] switch namespace [port-worker] ─veth─ [eth0 10.231.x.2/29] worker namespace
                                                  (bridge sw joins both ports)

    net = NetNs.create()
    subprocess.Popen([*net.exec_prefix(), "python", ...])   # runs inside the worker namespace
    net.cut("cable")      # the worker's cable pulled: its eth0 loses carrier
    net.cut("switch")     # the switch dies: both ends keep their links, packets vanish in between
    net.heal(...)         # the same link up again
    net.cleanup()         # both namespaces and every veth end are gone

Both cuts are `ip link set … down`. They differ in what TCP sees. With the cable pulled, the
worker's own kernel drops what it sends (no carrier) and retries a dropped retransmission every
0.5 s, so it is back within about half a second of the link; the host's packets vanish silently.
With the switch down, both ends see nothing but silence, as across a real network partition:
retransmissions back off exponentially (0.2 s, 0.4 s, 0.8 s, … from each send) and new connects
wait for SYN retries (1 s, 2 s, 4 s, …), so coming back takes seconds.

Needs root and the `ip` tool (iproute2); why_unavailable() says why not, when not.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass

CUTS = ("cable", "switch")


class NetNsError(RuntimeError):
    """An `ip` command failed; the message names it and its output."""


def why_unavailable() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if shutil.which("ip") is None:
        return "the ip tool (iproute2) is not installed"
    if os.geteuid() != 0:
        return f"running as uid {os.geteuid()}, not root"
    return None


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetNsError(f"ip {' '.join(args)} failed (exit {done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()}")
    return done


def _free_subnet() -> int:
    """A third octet x such that nothing on the host uses 10.231.x.0/29 (other runs pick at random too)."""
    used = ip("-4", "-o", "addr", "show").stdout + ip("-4", "route", "show", "table", "all").stdout
    for _ in range(50):
        x = random.randint(1, 254)
        if f"10.231.{x}." not in used:
            return x
    raise NetNsError("no free 10.231.x.0/29 subnet found in 50 tries")


@dataclass
class NetNs:
    worker_ns: str   # pgqw-<tag>-w: where the cut-off process runs
    switch_ns: str   # pgqw-<tag>-s: the bridge between the host and the worker namespace
    host_if: str     # the veth end on the host, pgqw<tag>h
    host_addr: str   # 10.231.x.1: what processes in the worker namespace connect to
    worker_addr: str  # 10.231.x.2

    @classmethod
    def create(cls) -> NetNs:
        tag = uuid.uuid4().hex[:6]
        x = _free_subnet()
        net = cls(worker_ns=f"pgqw-{tag}-w", switch_ns=f"pgqw-{tag}-s", host_if=f"pgqw{tag}h",
                  host_addr=f"10.231.{x}.1", worker_addr=f"10.231.{x}.2")
        w, s = net.worker_ns, net.switch_ns
        ip("netns", "add", s)
        try:
            ip("netns", "add", w)
            ip("link", "add", net.host_if, "type", "veth", "peer", "name", "port-host", "netns", s)
            ip("-n", w, "link", "add", "eth0", "type", "veth", "peer", "name", "port-worker", "netns", s)
            ip("-n", s, "link", "add", "sw", "type", "bridge")
            ip("-n", s, "link", "set", "port-host", "master", "sw")
            ip("-n", s, "link", "set", "port-worker", "master", "sw")
            for dev in ("port-host", "port-worker", "sw", "lo"):
                ip("-n", s, "link", "set", dev, "up")
            ip("addr", "add", f"{net.host_addr}/29", "dev", net.host_if)
            ip("link", "set", net.host_if, "up")
            ip("-n", w, "addr", "add", f"{net.worker_addr}/29", "dev", "eth0")
            ip("-n", w, "link", "set", "eth0", "up")
            ip("-n", w, "link", "set", "lo", "up")
        except BaseException:
            net.cleanup()
            raise
        return net

    def exec_prefix(self) -> list[str]:
        """Put before a command to run it in the worker namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self.worker_ns]

    def _link(self, cut: str) -> tuple[str, ...]:
        if cut == "cable":
            return ("-n", self.switch_ns, "link", "set", "port-worker")   # the switch end of the worker's cable
        if cut == "switch":
            return ("-n", self.switch_ns, "link", "set", "sw")
        raise ValueError(f"cut must be one of {CUTS}, got {cut!r}")

    def cut(self, cut: str) -> str:
        """Takes that link down; returns the command, for the record."""
        args = (*self._link(cut), "down")
        ip(*args)
        return "ip " + " ".join(args)

    def heal(self, cut: str) -> str:
        args = (*self._link(cut), "up")
        ip(*args)
        return "ip " + " ".join(args)

    def carrier(self) -> bool:
        """Whether the worker namespace's eth0 has a carrier (it loses it when its cable is pulled)."""
        return "NO-CARRIER" not in ip("-n", self.worker_ns, "-br", "link", "show", "eth0").stdout

    def cleanup(self) -> list[str]:
        """Deletes the host veth end and both namespaces (taking their veth ends along). Returns what
        failed, other than things already gone."""
        problems = []
        for args in (("link", "del", self.host_if), ("netns", "del", self.worker_ns),
                     ("netns", "del", self.switch_ns)):
            done = ip(*args, check=False)
            err = (done.stderr or "").strip()
            if done.returncode != 0 and "Cannot find device" not in err and "No such file" not in err:
                problems.append(f"ip {' '.join(args)}: {err}")
        return problems
