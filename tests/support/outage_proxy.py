"""A TCP proxy in front of the test server: an outage for one test's workers only."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from psycopg.conninfo import conninfo_to_dict

from tests.support.conninfo import dsn_host_port, quote_value


class OutageProxy:
    """Forwards a local port to the test server; :meth:`down` refuses and cuts every
    connection (as a server that went away), :meth:`up` accepts again on the same port.

    Workers that connect through it see a real outage (refused connects, dead sockets)
    while every other session on the server, other test suites included, is untouched.
    """

    def __init__(self, dsn: str) -> None:
        info = dsn_host_port(dsn)
        host = str(info.get("host") or "127.0.0.1")
        port = int(info.get("port") or 5432)
        # A host that is a directory names a Unix socket (the embedded server listens on
        # one only); the proxy still listens on TCP, so the workers' path is the same.
        self.target: str | tuple[str, int] = (
            f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port))
        self._dsn = dsn
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._server: socket.socket | None = None
        self.port = 0
        self.up()

    def dsn(self) -> str:
        """The test DSN, pointed at the proxy."""
        info = conninfo_to_dict(self._dsn)
        info.update(host="127.0.0.1", port=str(self.port))
        return " ".join(f"{k}={quote_value(str(v))}" for k, v in info.items())

    def up(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(128)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            for sock in list(self._socks):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._socks.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = self._connect_upstream()
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks |= {client, upstream}
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

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

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()
                with self._lock:
                    self._socks.discard(sock)
