"""An emulated cluster on one machine: network namespaces as hosts, joined through a bridge by
veth links whose rate is limited with a token bucket (`tc qdisc ... tbf`), in both directions.

    with EmulatedCluster(nodes=2) as cluster:
        cluster.set_rate(200)                      # Mbit/s on every host's link; 0 = unlimited
        cluster.run(node, ["torchrun", ...])        # a command inside host `node`
        cluster.address(node), cluster.tx_bytes(node)

Everything lives in namespaces this module makes (hosts `<tag>h<N>`, the switch `<tag>sw`) on
a 10.x.y.0/24 of their own, and is removed on exit. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN);
`available()` says whether namespaces can be made here.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid


def sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def available() -> tuple[bool, str]:
    """(True, "") where network namespaces can be made, else (False, why)."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return False, "iproute2 (`ip`, `tc`) is not installed"
    probe = f"asrprobe{uuid.uuid4().hex[:6]}"
    made = sh("ip", "netns", "add", probe)
    if made.returncode != 0:
        return False, f"cannot create network namespaces here ({made.stderr.strip()}); it needs root (CAP_SYS_ADMIN)"
    sh("ip", "netns", "del", probe)
    return True, ""


class NetworkSetupError(RuntimeError):
    pass


class EmulatedCluster:
    def __init__(self, nodes: int):
        self.nodes = nodes
        self.tag = uuid.uuid4().hex[:5]
        self.subnet = f"10.{200 + int(self.tag[:2], 16) % 50}.{int(self.tag[2:4], 16)}"
        self.switch = f"asr{self.tag}sw"
        self.hosts = [f"asr{self.tag}h{n}" for n in range(nodes)]
        self.rate_mbit = 0.0

    def address(self, node: int) -> str:
        return f"{self.subnet}.{node + 1}"

    def link(self, node: int) -> str:
        return "eth0"  # every host's one interface

    def _switch_port(self, node: int) -> str:
        return f"sw{node}"

    def __enter__(self) -> "EmulatedCluster":
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _do(self, *cmd: str) -> None:
        result = sh(*cmd)
        if result.returncode != 0:
            raise NetworkSetupError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()}")

    def _build(self) -> None:
        self._do("ip", "netns", "add", self.switch)
        self._do("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        self._do("ip", "-n", self.switch, "link", "set", "br0", "up")
        for node, host in enumerate(self.hosts):
            port = self._switch_port(node)
            self._do("ip", "netns", "add", host)
            self._do(
                "ip", "-n", host, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", self.switch
            )
            self._do("ip", "-n", host, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
            self._do("ip", "-n", host, "link", "set", "eth0", "up")
            self._do("ip", "-n", host, "link", "set", "lo", "up")
            self._do("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            self._do("ip", "-n", self.switch, "link", "set", port, "up")

    def set_rate(self, rate_mbit: float) -> None:
        """Every host's link limited to `rate_mbit` each way (0: unlimited)."""
        self.rate_mbit = rate_mbit
        for node, host in enumerate(self.hosts):
            for ns, dev in ((host, "eth0"), (self.switch, self._switch_port(node))):
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root")
                if rate_mbit > 0:
                    self._do("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", *tbf(rate_mbit))

    def command(self, node: int, cmd: list[str]) -> list[str]:
        """`cmd` run inside host `node`."""
        return ["ip", "netns", "exec", self.hosts[node], *cmd]

    def tx_bytes(self, node: int) -> int:
        out = sh("ip", "netns", "exec", self.hosts[node], "cat", "/sys/class/net/eth0/statistics/tx_bytes").stdout
        return int(out.strip() or 0)

    def close(self) -> None:
        for ns in [*self.hosts, self.switch]:
            sh("ip", "netns", "del", ns)


def tbf(rate_mbit: float) -> list[str]:
    """A token bucket of `rate_mbit`: a burst of 5 ms of traffic (at least 64 KB, which tbf
    needs at high rates on a 250 Hz kernel) and up to 100 ms of queue."""
    rate_bytes = rate_mbit * 1e6 / 8
    burst = max(64 * 1024, int(rate_bytes * 0.005))
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", "100ms"]
