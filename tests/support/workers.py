"""Subprocess workers: start tests/support/worker_process.py from data, and drive it.

* :func:`worker_config` / :func:`start_process`: the config dict and the process
  (``python -m tests.support.worker_process CONFIG``); :func:`spawn` waits for "ready";
* :func:`spawn_worker`: the plain worker of the process tests (type ``work``, effects
  ledger, optional sleep); :func:`stop_gracefully` / :func:`kill_leftovers`;
* :class:`Canceller`: a canceller process driven line by line over stdin/stdout;
* :class:`WorkerProc` / :func:`type_spec`: a fault scenario's worker (see
  :meth:`tests.support.fault_env.FaultEnv.spawn`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The repository root: ``tests`` must be importable in the child (``python -m``).
ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.support.worker_process"


def worker_config(dsn: str, schema: str, worker_id: str, **keys: Any) -> dict[str, Any]:
    """A worker_process config (see its docstring for the keys)."""
    return {"dsn": dsn, "schema": schema, "worker_id": worker_id, **keys}


def start_process(config: dict[str, Any], *, env: dict[str, str] | None = None,
                  wrap: Sequence[str] = (), **popen: Any) -> subprocess.Popen[Any]:
    """Start ``python -m tests.support.worker_process CONFIG`` (``popen``: Popen's options;
    text mode unless told otherwise). ``wrap``: a command prefix that execs the rest (e.g.
    ``ip netns exec NAME``: the pid stays the worker's)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    popen.setdefault("text", True)
    return subprocess.Popen(
        [*wrap, sys.executable, "-m", MODULE, json.dumps(config)],
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})},
        **popen,
    )


def spawn(config: dict[str, Any]) -> subprocess.Popen[str]:
    """Start the process (stderr merged into stdout) and wait until its first line says
    "ready"; otherwise fail with what it printed."""
    proc: subprocess.Popen[str] = start_process(
        config, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stdout.read() if proc.poll() is not None else "")
    return proc


def spawn_worker(
    dsn: str,
    schema: str,
    worker_id: str,
    *,
    sleep: float = 0.0,
    lease_grace: float = 30.0,
    poll: float = 0.05,
    concurrency: int = 4,
    mode: str = "cooperate",
    shutdown_grace: float = 15.0,
    abandon_grace: float = 5.0,
) -> subprocess.Popen[str]:
    """A worker serving type ``work``: each run records an effect, then sleeps ``sleep``
    seconds on its signal (``mode="ignore"``: regardless of it); ``mode="drain"`` runs until
    the queue is empty, otherwise until SIGTERM. Waits until it printed "ready"."""
    return spawn(worker_config(
        dsn, schema, worker_id,
        mode="drain" if mode == "drain" else "run",
        drain_timeout=120,
        store={"max_size": 4 + concurrency},
        worker={"lease_grace": lease_grace, "poll_interval": poll, "base_backoff": 0,
                "max_backoff": 0, "shutdown_grace": shutdown_grace,
                "abandon_grace": abandon_grace},
        handlers=[{"type": "work", "options": {"concurrency": concurrency},
                   "ledger": "effects", "sleep": sleep,
                   "sleep_mode": "ignore" if mode == "ignore" else "signal"}],
    ))


def stop_gracefully(procs: Sequence[subprocess.Popen[str]]) -> None:
    """SIGTERM every process, then wait: each must exit 0 (its output is the message)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out


def kill_leftovers(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """Kill whatever a failed test left running."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class WorkerProc:
    """One fault scenario's worker process (started by ``FaultEnv.spawn``)."""

    def __init__(self, worker_id: str, popen: subprocess.Popen[str], log_path: Path) -> None:
        self.worker_id = worker_id
        self.popen = popen
        self.log_path = log_path
        self.stopped = False  # SIGSTOPped

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            self.popen.send_signal(signum)
        if signum == signal.SIGSTOP:
            self.stopped = True
        elif signum == signal.SIGCONT:
            self.stopped = False

    def dump_stacks(self) -> str:
        """Every thread's stack (SIGUSR1 -> faulthandler into the log), for a diagnosis."""
        if not self.alive():
            return ""
        before = len(self.log_text())
        self.popen.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        return self.log_text()[before:]

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            self.popen.kill()
        self.popen.wait(30)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful shutdown) and wait; returns the exit code."""
        if self.stopped:
            self.signal(signal.SIGCONT)
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def output(self) -> str:
        """Whatever the process printed (after it exited)."""
        if self.popen.stdout is None:
            return ""
        try:
            return self.popen.stdout.read()
        except ValueError:
            return ""

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8") if self.log_path.exists() else ""

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines (non-JSON lines, e.g. tracebacks, come back as {"raw": ...})."""
        out: list[dict[str, Any]] = []
        for line in self.log_text().splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                item = {"raw": line}
            out.append(item if isinstance(item, dict) else {"raw": line})
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.logs() if e.get("event") == name]

    def warnings(self) -> int:
        """How many structlog lines it logged at warning or above."""
        return sum(1 for e in self.logs() if e.get("level") in ("warning", "error", "critical"))


def type_spec(name: str, **options: Any) -> dict[str, Any]:
    """One handler registration for the worker script."""
    return {"name": name, **options}


class Canceller:
    """A canceller process (``mode: "cancel"``), driven line by line: its own store and
    ``Queue``, so the in-process abort registry of the test's worker cannot help."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.proc: subprocess.Popen[str] = start_process(
            worker_config(dsn, schema, "canceller", mode="cancel", logs="stderr",
                          store={"max_size": 2}),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        """The next protocol line ("ready" / "done ..."), skipping anything else."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, "the canceller process exited"
            if line.startswith(("ready", "done")):
                return line.strip()

    def run(self, command: str) -> tuple[int, float, float]:
        """Send one command; returns (count cancelled, monotonic before, monotonic after)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        word, count, before, after = self._line().split()
        assert word == "done"
        return int(count), float(before), float(after)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
