"""A network namespace for worker processes, joined to the test's by veth pairs: a fault point
where packets are dropped silently (no RST, no FIN, no ICMP), as in a real partition.

The test server listens on loopback only, so each veth pair's outer end carries an
:class:`~tests.support.outage_proxy.OutageProxy` that forwards to it. A worker started with
:attr:`NetNamespace.command` connects through ``queue_dsn`` (the path the faults cut) and
writes its effects ledger through ``ledger_dsn`` (a second pair that is never cut: the
observer stays outside the fault).

* :meth:`cut` / :meth:`heal`: the queue path's outer end goes down / up. Packets either way
  are dropped; a worker's kernel retransmits into the void, so only TCP keepalives and
  ``tcp_user_timeout`` can tell it the connection is gone.
* :meth:`drop_from` / :meth:`undrop`: drop only what the worker sends from one local port
  (a policy-routing rule into a blackhole table), e.g. its LISTEN connection's; with
  :meth:`OutageProxy.hold` on that connection nothing flows either way.

Needs root and ``ip netns`` (CI runs as root): :func:`unavailable` says why not otherwise.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
from collections.abc import Sequence

from tests.support.outage_proxy import OutageProxy

_counter = itertools.count()
#: The routing table and rule priority of the blackhole for :meth:`NetNamespace.drop_from`
#: (inside the namespace: nothing else uses them there).
_BLACKHOLE_TABLE = "77"


def _ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def unavailable() -> str | None:
    """Why a namespace cannot be made here (not root, no ``ip``), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip(8) (iproute2)"
    return None


class NetNamespace:
    """A namespace named after this process, with a queue path and a ledger path."""

    def __init__(self, dsn: str) -> None:
        n = next(_counter)
        tag = f"{os.getpid() % 100000}x{n}"
        self.name = f"gq{tag}"
        # 10.B.C.0/29: B and C from the pid and a counter, so concurrent runs do not clash.
        pid = os.getpid()
        base = f"10.{200 + pid % 50}.{(pid // 50 + n) % 256}"
        self._outer = {"q": f"gqq{tag}", "l": f"gql{tag}"}
        self._addresses = {"q": (f"{base}.1", f"{base}.2"), "l": (f"{base}.5", f"{base}.6")}
        self._rules: list[str] = []
        self.proxies: dict[str, OutageProxy] = {}
        _ip("netns", "add", self.name)
        try:
            _ip("link", "set", "lo", "up", netns=self.name)
            for path, outer in self._outer.items():
                inner = f"gqi{path}{tag}"
                outer_ip, inner_ip = self._addresses[path]
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", self.name)
                _ip("addr", "add", f"{outer_ip}/30", "dev", outer)
                _ip("link", "set", outer, "up")
                _ip("addr", "add", f"{inner_ip}/30", "dev", inner, netns=self.name)
                _ip("link", "set", inner, "up", netns=self.name)
                self.proxies[path] = OutageProxy(dsn, host=outer_ip)
            _ip("route", "add", "blackhole", "default", "table", _BLACKHOLE_TABLE,
                netns=self.name)
        except BaseException:
            self.close()
            raise

    @property
    def command(self) -> list[str]:
        """The prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    @property
    def queue(self) -> OutageProxy:
        """The proxy on the queue path (the one the faults cut)."""
        return self.proxies["q"]

    def queue_dsn(self) -> str:
        """The DSN a worker inside uses for its queue (pool and LISTEN connections)."""
        return self.proxies["q"].dsn()

    def ledger_dsn(self) -> str:
        """The DSN a worker inside writes its ledger through (never cut)."""
        return self.proxies["l"].dsn()

    def cut(self) -> None:
        """Partition the queue path: every packet either way is dropped, silently."""
        _ip("link", "set", self._outer["q"], "down")

    def heal(self) -> None:
        """End the partition (the kernels' retransmissions get through again)."""
        _ip("link", "set", self._outer["q"], "up")

    def drop_from(self, ports: Sequence[int]) -> None:
        """Drop whatever the worker sends from these local ports (into the blackhole table)."""
        for port in ports:
            _ip("rule", "add", "sport", str(port), "table", _BLACKHOLE_TABLE, netns=self.name)
            self._rules.append(str(port))

    def undrop(self) -> None:
        """Remove every :meth:`drop_from` rule."""
        while self._rules:
            port = self._rules.pop()
            _ip("rule", "del", "sport", port, "table", _BLACKHOLE_TABLE, netns=self.name)

    def close(self) -> None:
        """Stop the proxies, delete the veth pairs and the namespace."""
        for proxy in self.proxies.values():
            proxy.down()
        for outer in self._outer.values():
            with contextlib.suppress(RuntimeError):
                _ip("link", "del", outer)
        with contextlib.suppress(RuntimeError):
            _ip("netns", "del", self.name)
