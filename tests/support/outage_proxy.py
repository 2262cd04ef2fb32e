"""A TCP proxy in front of the test server: network faults for one test's workers only."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from psycopg.conninfo import conninfo_to_dict

from tests.support.conninfo import dsn_host_port, quote_value

#: The proxy's own keepalives on the workers' side, as the server sets them for a store's
#: session (tcp_keepalives_* and tcp_user_timeout, from PostgresStore.connect's defaults):
#: a worker socket that a partition killed is closed, with its server session.
_PEER_KEEPIDLE = 5
_PEER_TIMEOUT_MS = 10_000


@dataclass(eq=False)
class Link:
    """One proxied connection: the worker's socket and the server's."""

    client: socket.socket
    upstream: socket.socket
    peer: tuple[str, int]
    #: The worker sent a ``LISTEN`` on it (its LISTEN connection).
    listen: bool = False
    #: Held: nothing is forwarded either way (the bytes wait in the kernel's buffers).
    held: bool = False
    #: Bytes read but not yet due (added latency): (due, destination, data).
    pending: deque[tuple[float, socket.socket, bytes]] = field(default_factory=deque)


class OutageProxy:
    """Forwards a local port to the test server, and injects faults on what it forwards.

    * :meth:`down` refuses and cuts every connection (as a server that went away), :meth:`up`
      accepts again on the same port;
    * :meth:`hold` stops forwarding on some or all connections without closing anything
      (no FIN, no RST: the bytes wait), :meth:`release` resumes them;
    * :meth:`set_latency` delays every chunk by that many seconds in each direction;
    * :meth:`reset` cuts every connection with an RST on both sides.

    Workers that connect through it see these faults while every other session on the
    server, other test suites included, is untouched. ``host``: the address it listens on
    (a veth address, to put a network namespace in front of it: tests/support/partition.py).
    """

    def __init__(self, dsn: str, *, host: str = "127.0.0.1") -> None:
        info = dsn_host_port(dsn)
        target_host = str(info.get("host") or "127.0.0.1")
        port = int(info.get("port") or 5432)
        # A host that is a directory names a Unix socket (the embedded server listens on
        # one only); the proxy still listens on TCP, so the workers' path is the same.
        self.target: str | tuple[str, int] = (
            f"{target_host}/.s.PGSQL.{port}" if target_host.startswith("/")
            else (target_host, port))
        self.host = host
        self._dsn = dsn
        self._lock = threading.Lock()
        self._links: set[Link] = set()
        self._server: socket.socket | None = None
        self.latency = 0.0
        self.accepted = 0
        self.port = 0
        self.up()

    def dsn(self) -> str:
        """The test DSN, pointed at the proxy."""
        info = conninfo_to_dict(self._dsn)
        info.pop("hostaddr", None)
        info.update(host=self.host, port=str(self.port))
        return " ".join(f"{k}={quote_value(str(v))}" for k, v in info.items())

    # -- faults ----------------------------------------------------------------------------
    def up(self) -> None:
        """Accept connections (again)."""
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.host, self.port))
        server.listen(128)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and close every open one (FIN)."""
        if self._server is not None:
            # shutdown() first: a close() alone leaves the accept() blocked in the other
            # thread listening, and the next connection would still get through.
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            self._server = None
        for link in self.links():
            for sock in (link.client, link.upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        with self._lock:
            self._links.clear()

    def links(self) -> list[Link]:
        """The connections open now."""
        with self._lock:
            return list(self._links)

    def hold(self, *, listen_only: bool = False) -> list[Link]:
        """Stop forwarding (all connections, or the LISTEN ones); returns the held links."""
        held = [link for link in self.links() if link.listen or not listen_only]
        for link in held:
            link.held = True
        return held

    def release(self) -> None:
        """Forward again on every held connection."""
        for link in self.links():
            link.held = False

    def set_latency(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` in each direction (0: none)."""
        self.latency = seconds

    def reset(self) -> int:
        """Cut every open connection with an RST both ways; returns how many were cut."""
        links = self.links()
        linger = struct.pack("ii", 1, 0)
        for link in links:
            for sock in (link.client, link.upstream):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                sock.close()
        with self._lock:
            self._links -= set(links)
        return len(links)

    # -- forwarding ------------------------------------------------------------------------
    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, peer = server.accept()
            except OSError:
                return
            try:
                upstream = self._connect_upstream()
            except OSError:
                client.close()
                continue
            client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, _PEER_KEEPIDLE)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 2)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, _PEER_TIMEOUT_MS)
            link = Link(client, upstream, peer)
            with self._lock:
                self._links.add(link)
                self.accepted += 1
            threading.Thread(target=self._pipe, args=(link,), daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.target, tuple):
            upstream = socket.create_connection(self.target, timeout=5)
        else:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.settimeout(5)
            try:
                upstream.connect(self.target)
            except OSError:
                upstream.close()
                raise
        upstream.settimeout(None)
        return upstream

    def _pipe(self, link: Link) -> None:
        a, b = link.client, link.upstream
        try:
            while True:
                wait = 0.05 if link.held else 1.0
                if link.pending and not link.held:
                    wait = max(min(link.pending[0][0] - time.monotonic(), wait), 0.0)
                ready, _, _ = select.select([] if link.held else [a, b], [], [], wait)
                if link.held:
                    continue
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is a and b"LISTEN " in data:
                        link.listen = True
                    link.pending.append(
                        (time.monotonic() + self.latency, b if sock is a else a, data))
                while link.pending and link.pending[0][0] <= time.monotonic():
                    _, dest, data = link.pending.popleft()
                    dest.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._links.discard(link)
