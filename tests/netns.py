"""Two simulated hosts on this machine, for multi-node tests: two network namespaces joined by a veth pair on a
private test subnet, each with its own address, hostname (a UTS namespace) and hosts file naming both, as two
machines on one network would have. Traffic stays between the two namespaces: nothing routes out of them.

The filesystem is shared (as a shared volume would be); a node that must not share it runs in a copy.
``TwoHosts`` is a context manager: leaving it kills every process left in either namespace and deletes both,
whatever happened inside.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

PREFIX = "solomon-mn"  # every namespace these tests make starts with it (and the test checks none is left)
SUBNET = "10.231.0"  # a private test subnet, only ever between the two namespaces
NETNS_ETC = Path("/etc/netns")  # `ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts


def unavailable() -> str | None:
    """Why two hosts cannot be simulated here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and a veth pair)"
    missing = [tool for tool in ("ip", "unshare", "hostname") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} on PATH"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None if made.returncode == 0 else f"`ip netns add` fails here ({made.stderr.strip()})"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def leftover_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(PREFIX)]


class TwoHosts:
    """node0 (``SUBNET``.1) and node1 (``SUBNET``.2), each a namespace with ``lo`` and its end of the veth pair."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.namespaces = [f"{PREFIX}-{tag}-{n}" for n in (0, 1)]
        self.interfaces = [f"smn{tag}{n}"[:15] for n in (0, 1)]  # IFNAMSIZ: 15 characters
        self.hostnames = ["node0", "node1"]
        self.addresses = [f"{SUBNET}.1", f"{SUBNET}.2"]
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> TwoHosts:
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _create(self) -> None:
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{a} {h}\n" for a, h in zip(self.addresses, self.hostnames, strict=True)
        )
        for name in self.namespaces:
            ip("netns", "add", name)
            (NETNS_ETC / name).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / name / "hosts").write_text(hosts)
        ip("link", "add", self.interfaces[0], "type", "veth", "peer", "name", self.interfaces[1])
        for name, interface, address in zip(self.namespaces, self.interfaces, self.addresses, strict=True):
            ip("link", "set", interface, "netns", name)
            ip("-n", name, "addr", "add", f"{address}/24", "dev", interface)
            ip("-n", name, "link", "set", "lo", "up")
            ip("-n", name, "link", "set", interface, "up")

    def start(self, node: int, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
        """Run ``argv`` on ``node`` (its namespace and hostname; gloo on its veth end), output to ``log``."""
        env = env | {"GLOO_SOCKET_IFNAME": self.interfaces[node], "TP_SOCKET_IFNAME": self.interfaces[node]}
        script = f'hostname {self.hostnames[node]} && exec "$@"'
        command = ["ip", "netns", "exec", self.namespaces[node], "unshare", "--uts", "sh", "-c", script, "sh", *argv]
        with open(log, "w") as out:
            process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)  # fmt: skip
        self.processes.append(process)
        return process

    def pids(self, node: int) -> list[int]:
        """Every process in ``node``'s namespace (torchrun's workers run in sessions of their own)."""
        listed = subprocess.run(["ip", "netns", "pids", self.namespaces[node]], capture_output=True, text=True,
                                timeout=30).stdout  # fmt: skip
        return [int(pid) for pid in listed.split()]

    def kill_node(self, node: int) -> None:
        """The host is gone: SIGKILL everything on it, agent and workers."""
        for pid in self.pids(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        for node, name in enumerate(self.namespaces):
            if name in leftover_namespaces():
                self.kill_node(node)
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        for name in self.namespaces:  # deleting a namespace deletes its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def worker_pid(agent: subprocess.Popen, timeout: float = 60) -> int:
    """The training process torchrun (``agent``, after the execs of ``ip netns exec`` and ``unshare``) started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := children(agent.pid):
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no worker under torchrun (pid {agent.pid}) within {timeout:g} s")
