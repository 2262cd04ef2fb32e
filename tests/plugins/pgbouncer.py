"""A PgBouncer of the suite's own, in transaction mode, in front of the test server.

``pgbouncer`` (session scope) starts ``pgbouncer`` (Debian's package; ``.ci/run`` installs
it) on a free port of 127.0.0.1 with a config and auth file in a temporary directory, in
front of whatever server ``pg_dsn`` names: 127.0.0.1:5432, or the embedded server's Unix
socket inside ``unshare -n``. It refuses to run as root, so as root it runs as ``postgres``
(or as the owner of the embedded server's socket directory, which only that user may enter).
Databases: ``golemq`` (``POOL_SIZE`` server connections shared by every client),
``golemq_single`` (one server connection: every client's transactions run on the same
server session, which makes "another client changed the session" deterministic) and
``golemq_prepared`` (the same, for the tests that leave prepared statements behind).

``bouncer_store`` is a migrated PostgresStore through it with ``prepare=False`` and a direct
``listen_dsn``: the contract suite's third store.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from golemq_pg import PostgresStore

#: Server connections per database/user pair of the ``golemq`` database: fewer than the
#: clients of most tests, so transactions of different clients do share server sessions.
POOL_SIZE = 6
_BINARIES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
#: Set (by .ci/run): a missing pgbouncer fails the suite instead of skipping it.
REQUIRE_ENV = "GOLEMQ_REQUIRE_PGBOUNCER"
_START_SECONDS = 15.0


@dataclass(frozen=True)
class Bouncer:
    """A running PgBouncer: where to reach it and what it fronts."""

    port: int
    user: str
    server_dsn: str
    directory: Path

    def dsn(self, database: str = "golemq") -> str:
        """A DSN through PgBouncer to one of its databases (see the module docstring)."""
        return make_conninfo(host="127.0.0.1", port=self.port, dbname=database, user=self.user)

    def log_text(self) -> str:
        """PgBouncer's log so far (for failure messages)."""
        try:
            return (self.directory / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""


def _binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((path for path in _BINARIES if os.access(path, os.X_OK)), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(directory: Path, server: dict[str, str], port: int) -> str:
    target = " ".join(
        f"{key}={server[key]}" for key in ("host", "port", "dbname", "user") if server.get(key)
    )
    return "\n".join(
        (
            "[databases]",
            f"golemq = {target}",
            f"golemq_single = {target} pool_size=1",
            f"golemq_prepared = {target} pool_size=1",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"admin_users = {server['user']}",
            f"auth_file = {directory / 'userlist.txt'}",
            "pool_mode = transaction",
            f"default_pool_size = {POOL_SIZE}",
            "max_client_conn = 2000",
            # A client waiting this long for a server connection is closed: a test that
            # holds one fails in seconds, not in the default two minutes.
            "query_wait_timeout = 30",
            f"logfile = {directory / 'pgbouncer.log'}",
            f"pidfile = {directory / 'pgbouncer.pid'}",
            # No ignore_startup_parameters: the store must not send `options`.
            "",
        )
    )


def _run_as(host: str) -> str | None:
    """Who runs pgbouncer: ourselves, unless we are root (which it refuses); then the owner
    of the server's socket directory (the embedded server's is private to its user), else
    ``postgres``."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name
        if owner != "root":
            return owner
    return "postgres"


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
            return True
    except psycopg.Error:
        return False


def _start(binary: str, server_dsn: str) -> tuple[subprocess.Popen[bytes], Bouncer]:
    server = conninfo_to_dict(server_dsn)
    server.setdefault("host", "127.0.0.1")
    server.setdefault("port", "5432")
    user = str(server.get("user") or "postgres")
    server["user"] = user
    run_as = _run_as(str(server["host"]))
    directory = Path(tempfile.mkdtemp(prefix="golemq-pgbouncer-"))
    port = _free_port()
    (directory / "pgbouncer.ini").write_text(_config(directory, {k: str(v) for k, v in
                                                                 server.items()}, port))
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    if run_as is not None:
        owner = pwd.getpwnam(run_as)
        for path in (directory, *directory.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    process = subprocess.Popen(
        [binary, str(directory / "pgbouncer.ini")],
        user=run_as,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bouncer = Bouncer(port=port, user=user, server_dsn=server_dsn, directory=directory)
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        if _answers(bouncer.dsn()):
            return process, bouncer
        time.sleep(0.1)
    _stop(process, directory)
    raise RuntimeError(f"pgbouncer did not start on port {port}:\n{bouncer.log_text()}")


def _stop(process: subprocess.Popen[bytes], directory: Path) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer(pg_dsn: str) -> Iterator[Bouncer]:
    """A PgBouncer in transaction mode in front of the suite's server (see the module)."""
    binary = _binary()
    if binary is None:
        why = "pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(why + f", and {REQUIRE_ENV} is set")
        pytest.skip(why)
    try:
        process, bouncer = _start(binary, pg_dsn)
    except RuntimeError:  # a port taken between choosing and binding it: once more
        process, bouncer = _start(binary, pg_dsn)
    try:
        yield bouncer
    finally:
        _stop(process, bouncer.directory)


@pytest.fixture
def bouncer_store(pgbouncer: Bouncer, pg_dsn: str, schema: str) -> Iterator[PostgresStore]:
    """A migrated PostgresStore through PgBouncer: ``prepare=False``, LISTEN direct."""
    store = PostgresStore.connect(
        pgbouncer.dsn(), schema=schema, min_size=1, max_size=8, prepare=False, listen_dsn=pg_dsn
    )
    store.migrate()
    yield store
    store.close()
