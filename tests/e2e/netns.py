"""A private test network of Linux network namespaces: one per host, joined by veth pairs to
a bridge that lives in a namespace of its own, so nothing touches the host's network.

Hosts get addresses in 198.18.13.0/24 (RFC 2544's benchmarking range), which exists only
inside these namespaces. Every namespace is named ``PREFIX-*``, the prefix made from this
checkout's path, so two checkouts' suites (a developer's and a CI clone's on one machine) each
have their own network and never remove each other's; :func:`cleanup` removes them all
(leftovers of a crashed earlier run of this checkout too). Needs root and ``ip`` (iproute2).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

PREFIX = "llmt" + hashlib.sha1(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:6]
SUBNET = "198.18.13"
BRIDGE_NS = f"{PREFIX}-br"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


def filter_unavailable() -> str | None:
    """Why packets cannot be dropped inside a namespace here (None when they can): iptables."""
    if shutil.which("iptables") is None:
        return "the iptables command is not installed (Debian package iptables)"
    return None


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"{PREFIX}-probe"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def cleanup() -> None:
    """Delete every namespace named PREFIX-* (their veths and the bridge go with them)."""
    listed = ip("netns", "list", check=False).stdout.split("\n")
    for line in listed:
        name = line.split(" ", 1)[0].strip()
        if name.startswith(PREFIX + "-"):
            for pid in ip("netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            ip("netns", "del", name, check=False)


class TestNet:
    """Hosts on one bridge. ``add(name)`` -> its address; ``popen``/``run`` inside a host."""

    def __init__(self) -> None:
        self.hosts: dict[str, str] = {}
        self._procs: list[subprocess.Popen[Any]] = []
        ip("netns", "add", BRIDGE_NS)
        self._in(BRIDGE_NS, "ip", "link", "add", "br0", "type", "bridge")
        self._in(BRIDGE_NS, "ip", "link", "set", "br0", "up")

    def ns(self, host: str) -> str:
        return f"{PREFIX}-{host}"

    def add(self, host: str) -> str:
        """A new host (namespace) with lo up and eth0 on the bridge; returns its address."""
        ns, n = self.ns(host), len(self.hosts) + 2
        addr = f"{SUBNET}.{n}"
        ip("netns", "add", ns)
        peer = f"v{n}"
        ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer, "netns", BRIDGE_NS)
        self._in(BRIDGE_NS, "ip", "link", "set", peer, "master", "br0")
        self._in(BRIDGE_NS, "ip", "link", "set", peer, "up")
        self._in(ns, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
        self._in(ns, "ip", "link", "set", "eth0", "up")
        self._in(ns, "ip", "link", "set", "lo", "up")
        self.hosts[host] = addr
        return addr

    def link(self, host: str, up: bool) -> None:
        """Cut (or restore) a host's only link: its eth0 goes down."""
        self._in(self.ns(host), "ip", "link", "set", "eth0", "up" if up else "down")

    def drop(self, host: str, *match: str, chain: str = "INPUT") -> list[str]:
        """A packet filter rule in ``host``: packets matching ``match`` (iptables arguments, e.g.
        ``-s ADDR`` or ``-m statistic --mode random --probability 0.05``) are dropped, silently, as
        a lossy or partitioned network drops them. Returns the rule, for :meth:`undrop`."""
        rule = [chain, *match, "-j", "DROP"]
        self._in(self.ns(host), "iptables", "-A", *rule)
        return rule

    def undrop(self, host: str, rule: list[str]) -> None:
        self._in(self.ns(host), "iptables", "-D", *rule)

    def dropped(self, host: str) -> int:
        """Packets ``host``'s DROP rules have dropped so far."""
        out = self.run(host, ["iptables", "-L", "-v", "-x", "-n"])
        return sum(int(line.split()[0]) for line in out.splitlines() if " DROP " in f" {line} " and line.split()[0].isdigit())

    def _in(self, ns: str, *cmd: str) -> None:
        out = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=20)
        if out.returncode != 0:
            raise RuntimeError(f"{ns}: {' '.join(cmd)}: {out.stderr.strip()}")

    def popen(self, host: str, cmd: Sequence[str], log: Path, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[Any]:
        f: IO[str] = log.open("w")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *cmd], stdout=f, stderr=subprocess.STDOUT,
                             env=env, cwd=cwd)
        self._procs.append(p)
        return p

    def run(self, host: str, cmd: Sequence[str], timeout: float = 30) -> str:
        out = subprocess.run(["ip", "netns", "exec", self.ns(host), *cmd], capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{host}: {' '.join(cmd)}: {out.stderr.strip()[-2000:]}")
        return out.stdout

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        cleanup()


@contextmanager
def fresh_net(*needs: Callable[[], str | None]) -> Iterator[TestNet]:
    """A TestNet for one test (a pytest fixture's body): skips when namespaces, or anything in
    ``needs`` (e.g. :func:`filter_unavailable`), cannot be had here, except under CI=true, where
    .ci/run installs them and a skip would hide the test: it fails. Leftovers of a crashed
    earlier run are removed first; every namespace is checked gone at the end."""
    import pytest

    reason = unavailable() or next((r for need in needs if (r := need())), None)
    if reason:
        if needs and os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    cleanup()
    n = TestNet()
    try:
        yield n
    finally:
        n.close()
        left = [line for line in ip("netns", "list").stdout.splitlines() if line.startswith(PREFIX)]
        assert not left, f"namespaces left behind: {left}"
