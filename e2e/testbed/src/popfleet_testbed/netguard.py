"""Which sockets the testbed's processes hold, and whether any leads off the host.

Why: the testbed invents addresses (service ClusterIPs in 10.96.0.0/16) that route to
real networks here; the rule is that nothing — control plane, kubelet, pods, tests — ever
connects anywhere but 127.0.0.0/8. By design every component is configured with loopback
addresses only; this module lets a test *assert* it, by reading the kernel's socket tables.

How: ``/proc/net/{tcp,tcp6,udp,udp6}`` list every socket of the network namespace with its
inode; ``/proc/<pid>/fd/*`` links name the inodes a process holds (``socket:[<inode>]``).
A socket counts as a connection when its remote address is set (not 0.0.0.0:0 / ::). IPv6
addresses are accepted when loopback (::1) or IPv4-mapped loopback (::ffff:127.x.y.z).
``exposed_listeners`` also finds listening sockets bound beyond loopback (e.g. 0.0.0.0).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from popfleet_testbed import controlplane, processes


@dataclass(frozen=True, slots=True)
class Connection:
    pid: int
    proto: str
    local: str
    remote: str
    remote_ip: ipaddress.IPv4Address | ipaddress.IPv6Address


def _addr(hex_addr: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1]), int(port, 16)
    # /proc prints IPv6 as four little-endian 32-bit words.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return ipaddress.IPv6Address(words), int(port, 16)


def _table(proto: str) -> dict[int, tuple[str, str, ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """inode → (local, remote, remote ip) for sockets with a remote address."""
    result = {}
    try:
        lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
    except OSError:
        return {}
    for line in lines:
        fields = line.split()
        local_ip, local_port = _addr(fields[1])
        remote_ip, remote_port = _addr(fields[2])
        if remote_port == 0 and remote_ip.is_unspecified:
            continue
        result[int(fields[9])] = (
            f"{local_ip}:{local_port}",
            f"{remote_ip}:{remote_port}",
            remote_ip,
        )
    return result


def _listening(proto: str) -> dict[int, tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """inode → bound (ip, port) of TCP sockets in LISTEN state (0A)."""
    try:
        lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
    except OSError:
        return {}
    result = {}
    for line in lines:
        fields = line.split()
        if fields[3] == "0A":
            result[int(fields[9])] = _addr(fields[1])
    return result


def exposed_listeners(pids: Iterable[int]) -> list[tuple[int, str]]:
    """(pid, "ip:port") of listening sockets bound anywhere but loopback (0.0.0.0 included)."""
    tables = [_listening("tcp"), _listening("tcp6")]
    found = []
    for pid in pids:
        for inode in _socket_inodes(pid):
            for table in tables:
                if inode in table:
                    ip, port = table[inode]
                    if not is_loopback(ip):
                        found.append((pid, f"{ip}:{port}"))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def connections(pids: Iterable[int]) -> list[Connection]:
    tables = {proto: _table(proto) for proto in ("tcp", "tcp6", "udp", "udp6")}
    found = []
    for pid in pids:
        for inode in _socket_inodes(pid):
            for proto, table in tables.items():
                if inode in table:
                    local, remote, ip = table[inode]
                    found.append(Connection(pid, proto, local, remote, ip))
    return found


def is_loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` and every live process below them (by parent PID)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    result, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in result:
            continue
        result.add(pid)
        todo.extend(children.get(pid, []))
    return result


def testbed_pids(run_dir: Path) -> set[int]:
    """Every live process of the testbed in ``run_dir``: components, pods, their children."""
    layout = controlplane.Layout(run_dir)
    roots = []
    for pid_file in [*layout.pids.glob("*.pid"), *layout.state.glob("pods/*/containers/*.pid")]:
        rec = processes.read_pid_file(pid_file)
        if rec is not None and processes.alive(rec):
            roots.append(rec.pid)
    return descendants(roots)
